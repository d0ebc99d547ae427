"""The HTTP API and page of `coach serve` (FastAPI): submit, list, follow and stop jobs; summary; SSE; metrics.

Handlers only translate: a ServedRun does the work, the board answers what is shown. Errors are one line, in
FastAPI's shape: 422 `{"detail": [{"loc": ["body", FIELD], "msg": "request: FIELD: what is wrong", ...}]}` for a
job that fails validation, `{"detail": "..."}` otherwise (404 unknown job, 409 a name taken or a job already
done, 413 a body too large, 503 a server that is stopping).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Sequence

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from coach.service import function_logs
from coach.service.exports import csv_lines, jsonl_lines
from coach.service.session import MAX_RECORDS, JobExists, NotRunning, RunInputError, ServedRun, UnknownJob
from coach.service.submission import checked_submission, usable_models

PAGE = Path(__file__).parent / "page"
SSE_POLL_S = 0.25  # how often an event stream looks for news
SSE_HEARTBEAT_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream
JOB_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "application/json")
MAX_PROBLEMS = 50  # a 422 lists at most this many problems, then says how many more there were

SUBMIT_EXAMPLE = {"name": "lenet-web", "model": "lenet.py", "batch_size": 64, "optimizer": "sgd",
                  "learning_rate": 0.05, "target_loss": 0.3, "max_epochs": 3, "budget": 0.05, "workers": 1,
                  "servers": 1}


def _problem(line: str) -> dict:
    """A validation line as one of FastAPI's error entries: where (the field) and the whole line."""
    parts = line.split(": ", 2)
    field = parts[1] if len(parts) == 3 else "(file)"
    return {"loc": ["body", field], "msg": line, "type": "value_error"}


def _invalid(lines: Sequence[str]) -> JSONResponse:
    shown = list(lines[:MAX_PROBLEMS])
    if len(lines) > MAX_PROBLEMS:
        shown.append(f"request: (file): {len(lines) - MAX_PROBLEMS} more problems not listed")
    return JSONResponse({"detail": [_problem(line) for line in shown]}, 422)


def create_app(served: ServedRun, model_folders: Sequence[Path]) -> FastAPI:
    app = FastAPI(title="Coach", version="1", redirect_slashes=False, docs_url=None, redoc_url=None,
                  description="Submit deep-learning training jobs, follow them live, stop them. The results "
                              "folder is the single record; every job's log is its JSON lines. A server started "
                              "with a token wants `Authorization: Bearer TOKEN` on every call: the Authorize button.")
    app.mount("/static", StaticFiles(directory=PAGE), name="static")

    def openapi() -> dict:
        """The schema with the bearer token declared, so that the docs page's Authorize button sends it."""
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "description": "the server's --token"}}
            schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(StarletteHTTPException)
    async def one_line(request: Request, error: StarletteHTTPException) -> JSONResponse:
        """Every error names its endpoint: `PATH: what is wrong` (a route's own message already does)."""
        detail = str(error.detail)
        if not detail.startswith("/"):
            detail = f"{request.method} {request.url.path}: {detail.lower()}"
        return JSONResponse({"detail": detail}, error.status_code, headers=getattr(error, "headers", None))

    def job_or_404(name: str, endpoint: str) -> dict:
        job = served.board.job(name)
        if job is None:
            raise HTTPException(404, f"{endpoint}: no job {name!r} in run {served.run_id}")
        return job

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(PAGE / "index.html", media_type="text/html")

    @app.get("/jobs/{name}", include_in_schema=False)
    def job_page(name: str) -> FileResponse:
        """A job's own page (a link to keep): the page's shell, which reads the job from the API."""
        return FileResponse(PAGE / "index.html", media_type="text/html")

    @app.get("/docs", include_in_schema=False)
    def docs() -> FileResponse:
        """The API's docs (Swagger UI, served from this server: they work offline)."""
        return FileResponse(PAGE / "docs.html", media_type="text/html")

    @app.post("/api/jobs", status_code=201, summary="Submit a job (a job file's YAML or JSON as the body)",
              responses={422: {"description": "the job is not valid; one line per problem, naming the field"},
                         409: {"description": "a job of that name is in the run already"},
                         413: {"description": "the body is larger than the server's --max-body"},
                         415: {"description": "the body is not declared YAML or JSON"},
                         503: {"description": "the server is stopping"}},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/yaml": {"schema": {"type": "string"}, "example": "".join(
                      f"{key}: {value}\n" for key, value in SUBMIT_EXAMPLE.items())},
                  "application/json": {"schema": {"type": "object"}, "example": SUBMIT_EXAMPLE}}}})
    async def submit(request: Request) -> dict:
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in JOB_TYPES:  # a form another site's page could send (text/plain) is not a job
            raise HTTPException(415, f"/api/jobs: send the job as application/yaml or application/json, not "
                                     f"{kind or 'no Content-Type'}")
        raw = await request.body()
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            return _invalid([f"request: (file): not UTF-8 text (byte {error.start})"])
        # parsing and the model check take CPU: off the event loop, so that pages and event streams go on
        spec, problems = await asyncio.to_thread(checked_submission, text, model_folders)
        if spec is None:
            return _invalid(problems)
        refused = served.refused(spec)
        if refused is not None:
            return _invalid([f"request: {refused}"])
        try:
            await asyncio.to_thread(served.submit, spec)
        except JobExists as error:
            raise HTTPException(409, f"/api/jobs: {error}") from None
        except NotRunning as error:
            raise HTTPException(503, f"/api/jobs: {error}") from None
        except (RuntimeError, TimeoutError):  # the run stopped while the job was being added: it is in run.json
            raise HTTPException(503, f"/api/jobs: the server is stopping; job {spec.name!r} is recorded and starts "
                                     "when the server starts again") from None
        return {"job": spec.name, "run_id": served.run_id}

    @app.get("/api/jobs", summary="Every job: phase, epoch, loss, counts, cost against budget, why it waits")
    def jobs() -> dict:
        return {"run_id": served.run_id, "jobs": served.board.jobs()}

    @app.get("/api/jobs/{name}", summary="One job's status and records `start` .. `start + limit - 1` of its log",
             responses={404: {"description": "no such job"}})
    def job(name: str, start: int = Query(0, ge=0), limit: int = Query(MAX_RECORDS, ge=1, le=MAX_RECORDS)) -> dict:
        status = job_or_404(name, f"/api/jobs/{name}")
        try:
            records, total = served.records(name, start, limit)
        except UnknownJob as error:
            raise HTTPException(404, f"/api/jobs/{name}: {error}") from None
        except RunInputError as error:
            raise HTTPException(500, f"/api/jobs/{name}: {error}") from None
        return {"status": status, "records": records, "start": start, "total": total}

    @app.get("/api/jobs/{name}/overview", summary="One job's page: spec, times, end reason, money, why it waits",
             responses={404: {"description": "no such job"}})
    def overview(name: str) -> dict:
        try:
            return served.overview(name)
        except UnknownJob as error:
            raise HTTPException(404, f"/api/jobs/{name}/overview: {error}") from None

    def log_of(name: str, endpoint: str) -> Path:
        job_or_404(name, endpoint)
        return served.run_dir / f"{name}.jsonl"

    @app.get("/api/jobs/{name}/records.csv", summary="The job's log as CSV (one row per line)",
             response_class=StreamingResponse, responses={404: {"description": "no such job"}})
    def records_csv(name: str) -> StreamingResponse:
        log = log_of(name, f"/api/jobs/{name}/records.csv")
        return StreamingResponse(csv_lines(log), media_type="text/csv; charset=utf-8",
                                 headers={"Content-Disposition": f'attachment; filename="{name}.csv"'})

    @app.get("/api/jobs/{name}/records.jsonl", summary="The job's log as it is on disk (JSON lines)",
             response_class=StreamingResponse, responses={404: {"description": "no such job"}})
    def records_jsonl(name: str) -> StreamingResponse:
        log = log_of(name, f"/api/jobs/{name}/records.jsonl")
        return StreamingResponse(jsonl_lines(log), media_type="application/jsonl",
                                 headers={"Content-Disposition": f'attachment; filename="{name}.jsonl"'})

    @app.get("/api/jobs/{name}/logs", summary="The tail of the job's function logs; `follow=true`: server-sent "
                                              "`log` events as lines arrive",
             responses={404: {"description": "no such job"}})
    async def logs(request: Request, name: str, lines: int = Query(200, ge=0, le=function_logs.MAX_LINES),
                   follow: bool = False) -> Response:
        endpoint = f"/api/jobs/{name}/logs"
        try:
            files = served.function_logs(name)
        except UnknownJob as error:
            raise HTTPException(404, f"{endpoint}: {error}") from None
        offsets: dict[str, int] = {}
        first: dict[str, list[str]] = {}
        for function, path in files.items():
            try:
                first[function], offsets[function] = await asyncio.to_thread(function_logs.tail, path, lines)
            except OSError:
                continue
        if not follow:
            return JSONResponse({"job": name, "run_id": served.run_id, "functions": first})

        async def stream():
            for function, tail in first.items():
                if tail:
                    yield f"event: log\ndata: {json.dumps({'function': function, 'lines': tail})}\n\n"
            quiet_s = 0.0
            while served.running and not await request.is_disconnected():
                await asyncio.sleep(SSE_POLL_S)
                quiet_s += SSE_POLL_S
                for function, path in served.function_logs(name).items():
                    try:
                        new, offsets[function] = await asyncio.to_thread(function_logs.since, path,
                                                                         offsets.get(function, 0))
                    except OSError:
                        continue
                    if new:
                        quiet_s = 0.0
                        yield f"event: log\ndata: {json.dumps({'function': function, 'lines': new})}\n\n"
                if quiet_s >= SSE_HEARTBEAT_S:
                    quiet_s = 0.0
                    yield ": still here\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    @app.post("/api/jobs/{name}/stop", status_code=202, summary="Stop a job for good; its log is kept",
              responses={404: {"description": "no such job"}, 409: {"description": "the job has finished"}})
    async def stop(name: str) -> dict:
        job_or_404(name, f"/api/jobs/{name}/stop")
        try:
            answer = await asyncio.to_thread(served.stop, name)
        except UnknownJob as error:
            raise HTTPException(404, f"/api/jobs/{name}/stop: {error}") from None
        except (NotRunning, RuntimeError, TimeoutError):
            raise HTTPException(503, f"/api/jobs/{name}/stop: the server is stopping; its jobs stop with it") \
                from None
        if answer.already_done:
            raise HTTPException(409, f"/api/jobs/{name}/stop: job {name!r} has finished already")
        return {"job": name, "stopping": True}

    @app.get("/api/summary", summary="The run's summary (summary.json as it is now)")
    def summary() -> dict:
        return served.summary()

    @app.get("/api/cluster", summary="The cluster's nodes with the functions bound to them, then the pending ones")
    def cluster() -> dict:
        return {"cluster": served.cluster.name, "nodes": served.board.nodes()}

    @app.get("/api/models", summary="Model files a job may name (relative to the server's model folders)")
    def models() -> dict:
        return {"folders": [str(folder) for folder in model_folders], "models": usable_models(model_folders),
                "example": SUBMIT_EXAMPLE}

    @app.get("/api/events", summary="Server-sent events: a `board` event with every job and node on each change")
    async def events(request: Request) -> StreamingResponse:
        async def stream():
            seen, quiet_s = -1, 0.0
            while served.running and not await request.is_disconnected():
                version = served.board.version
                if version != seen:
                    seen, quiet_s = version, 0.0
                    board = {"version": version, "run_id": served.run_id, "jobs": served.board.jobs(),
                             "nodes": served.board.nodes()}
                    yield f"event: board\ndata: {json.dumps(board)}\n\n"
                elif quiet_s >= SSE_HEARTBEAT_S:
                    quiet_s = 0.0
                    yield ": still here\n\n"
                await asyncio.sleep(SSE_POLL_S)
                quiet_s += SSE_POLL_S

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    @app.get("/metrics", summary="Prometheus metrics", response_class=Response)
    def metrics() -> Response:
        return Response(served.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
