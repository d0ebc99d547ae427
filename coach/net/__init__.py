"""Network clients' shared limits: `http.bounded_request` (timeouts, a deadline, a largest answer) for every HTTP
client of Coach, below the layers that call it (platforms, service)."""
