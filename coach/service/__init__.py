"""`coach serve`: one long-running run that jobs are submitted to over HTTP, with a page, SSE and /metrics.

board: what the page and the API show (thread-safe); observed: the placement and the logs, seen on their way;
session: the run folder and its driver thread; submission: a submitted job's text, checked; api: the HTTP app;
security: the bearer token and the body limit; metrics: Prometheus; client: the CLI's side of the API.
"""
