"""`check-attention`: a grader's checks on your own attention layer (attnlab/probing/attention_check.py)."""

from __future__ import annotations

import argparse

from . import flags, results


def cmd_check_attention(args: argparse.Namespace) -> int:
    from ..probing.attention_check import check_attention

    report = check_attention(args.attention, same_as=args.same_as)
    print(report.text())
    results.publish(args, report.to_dict())
    return 0 if report.passed else 1


def register(command) -> None:
    p = command("check-attention", "check an attention layer as a grader would: shape, causality, batch "
                "independence, gradients, determinism, KV cache, equality with a lab variant", cmd_check_attention)
    p.add_argument("attention", choices=flags.attention_choices(), metavar="FILE.py:CLASS",
                   help="your attention class (FILE.py:ClassName or package.module:ClassName), or a variant's name")
    p.add_argument("--same-as", default=None, choices=flags.attention_choices(),
                   help="also check equality (to 1e-6) with this lab variant after copying its weights across "
                        "by name, e.g. vanilla (default: off)")
    results.add_json_flag(p)
