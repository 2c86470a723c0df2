"""The lab in the browser (`attnlab serve`): a local web page over the library's answers,
evidence, attention maps, causal traces, dev-set scores and edits.

- lab.py: what the page shows, computed by the library (no web code): one ``Lab`` holds the
  runs named on the command line, answers under one lock (one model forward at a time), and
  checks every input;
- app.py: the FastAPI application (JSON endpoints, request limits, errors as 4xx JSON);
- jobs.py: training jobs started from the page (one at a time, queued, state on disk), each
  run by worker.py in its own process (`attnlab learn`'s library call, progress written for
  the page's learning curve);
- static/: the page itself, plain HTML and JavaScript with no build step.

FastAPI and uvicorn are the optional extra ``serve`` (``pip install -e '.[serve]'``); nothing
else in attnlab imports this package.
"""
