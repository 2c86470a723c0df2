"""The web application of `attnlab serve`: the page (static/) and its JSON endpoints over a
``Lab`` (lab.py) and its training ``Jobs`` (jobs.py).

Every failure a user can cause is a 4xx JSON answer ``{"error": "one line"}`` that the page
shows next to the form that caused it: bad input 400 (the library's own message in plain
words, lab.plain: an unknown character names it), training turned off 403, an unknown run,
edit, fact set or job 404, an existing directory or a finished job 409, a body over
MAX_BODY_BYTES 413, a malformed request 422, too many waiting jobs or more than ``rate``
requests a minute from one client 429. Anything else is a 500 with a one-line message and no
traceback.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, StrictInt
from starlette.exceptions import HTTPException

from .jobs import Jobs
from .lab import Lab, LabError, plain

STATIC = Path(__file__).parent / "static"
MAX_BODY_BYTES = 4096  # a question, a person and a place fit many times over
DEFAULT_RATE = 120  # requests a minute from one client


class AskBody(BaseModel):
    question: str
    runs: list[StrictInt] | None = None  # strict: JSON true is not run 1


class RunQuestion(BaseModel):
    question: str
    run: StrictInt = 0


class TraceBody(RunQuestion):
    samples: StrictInt = 3


class EditBody(BaseModel):
    run: StrictInt = 0
    person: str
    place: str
    method: str | None = None  # None: attnlab edit's default
    relation: str | None = None  # which answer of a model of several relations (checked against its fact set)


class SaveBody(BaseModel):
    name: str


class JobBody(BaseModel):
    fact_set: StrictInt
    minutes: float


class CompareBody(BaseModel):
    runs: list[StrictInt]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class RateLimit:
    """At most ``per_minute`` requests in any 60 seconds from one client address (0: no limit)."""

    def __init__(self, per_minute: int):
        self.per_minute = per_minute
        self.seen: dict[str, deque] = defaultdict(deque)

    def wait(self, client: str, now: float) -> float:
        """0 when the request may go on, else the seconds until it would be allowed."""
        if not self.per_minute:
            return 0.0
        for address in [a for a, t in self.seen.items() if t and now - t[-1] >= 60.0]:
            del self.seen[address]  # quiet for a minute: forgotten, so the table stays small
        times = self.seen[client]
        while times and now - times[0] >= 60.0:
            times.popleft()
        if len(times) >= self.per_minute:
            return 60.0 - (now - times[0])
        times.append(now)
        return 0.0


def create_app(lab: Lab, rate: int = DEFAULT_RATE, jobs: Jobs | None = None) -> FastAPI:
    """The page over ``lab``; training jobs from the page when ``jobs`` is given (and enabled)."""
    app = FastAPI(title="attnlab", docs_url=None, redoc_url=None, openapi_url=None)
    _guard(app, RateLimit(rate))
    _routes(app, lab)
    _job_routes(app, jobs)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _guard(app: FastAPI, limit: RateLimit) -> None:
    """Request size and rate limits, and errors as one-line JSON."""

    @app.middleware("http")
    async def limits(request: Request, call_next):
        if request.url.path.startswith("/api/"):
            size = request.headers.get("content-length")
            if size is not None and (not size.isdigit() or int(size) > MAX_BODY_BYTES):
                return _error(413, f"the request is larger than {MAX_BODY_BYTES} bytes")
            if size is None:  # sent chunked: the limit is kept while the body is read, not after
                chunks, read = [], 0
                async for chunk in request.stream():
                    read += len(chunk)
                    if read > MAX_BODY_BYTES:
                        return _error(413, f"the request is larger than {MAX_BODY_BYTES} bytes")
                    chunks.append(chunk)
                request._body = b"".join(chunks)  # what the endpoint then reads (Starlette's cache)
            if (wait := limit.wait(request.client.host if request.client else "?", time.monotonic())):
                return _error(429, f"too many requests: at most {limit.per_minute} a minute; "
                                   f"try again in {wait:.0f} s")
        return await call_next(request)

    @app.exception_handler(LabError)
    async def lab_error(request: Request, e: LabError):
        return _error(e.status, str(e))

    @app.exception_handler(HTTPException)  # FastAPI's own, e.g. a body that is not UTF-8
    async def http_error(request: Request, e: HTTPException):
        return _error(e.status_code, " ".join(str(e.detail).split()))

    @app.exception_handler(ValueError)  # the library's input errors: VocabError, DataError, TraceError
    async def bad_input(request: Request, e: ValueError):
        return _error(400, plain(str(e)))

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, e: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc'][1:] if isinstance(p, str)) or 'body'}: "
                             f"{err['msg']}" for err in e.errors())
        return _error(422, f"malformed request: {problems}")

    @app.exception_handler(Exception)
    async def unexpected(request: Request, e: Exception):
        return _error(500, f"internal error: {type(e).__name__}")


def _routes(app: FastAPI, lab: Lab) -> None:
    # Plain (sync) endpoints: FastAPI runs them in its thread pool; the lab's lock makes the
    # model computations take turns.
    @app.get("/")
    def page():
        return FileResponse(STATIC / "index.html")

    @app.get("/api/runs")
    def runs():
        return {"runs": lab.describe_runs()}

    @app.post("/api/ask")
    def ask(body: AskBody):
        return lab.ask(body.question, body.runs)

    @app.post("/api/attention")
    def attention(body: RunQuestion):
        return lab.attention(body.question, body.run)

    @app.post("/api/trace")
    def trace(body: TraceBody):
        return lab.trace(body.question, body.run, body.samples)

    @app.post("/api/compare")
    def compare(body: CompareBody):
        return lab.compare(body.runs)

    @app.get("/api/dev")
    def dev(run: int = 0):
        return lab.dev(run)

    @app.post("/api/edit")
    def edit(body: EditBody):
        return lab.edit(body.run, body.person, body.place, body.method, body.relation)

    @app.post("/api/edit/{edit_id}/ask")
    def ask_edit(edit_id: int):
        return lab.ask_edit(edit_id)

    @app.post("/api/edit/{edit_id}/save")
    def save(edit_id: int, body: SaveBody):
        return lab.save_edit(edit_id, body.name)


def _job_routes(app: FastAPI, jobs: Jobs | None) -> None:
    @app.get("/api/jobs")
    def listed():
        if jobs is None:
            return {"enabled": False, "budget": [0, 0], "fact_sets": [], "jobs": []}
        jobs.poll()
        return jobs.describe()

    @app.post("/api/jobs")
    def start(body: JobBody):
        if jobs is None:
            raise LabError("training is turned off on this server (--no-train)", 403)
        return jobs.start(body.fact_set, body.minutes)

    @app.post("/api/jobs/{job_id}/resume")
    def resume(job_id: int):
        if jobs is None:
            raise LabError("training is turned off on this server (--no-train)", 403)
        return jobs.resume(job_id)

    @app.post("/api/jobs/{job_id}/cancel")
    def cancel(job_id: int):
        if jobs is None:
            raise LabError(f"no job {job_id}", 404)
        return jobs.cancel(job_id)
