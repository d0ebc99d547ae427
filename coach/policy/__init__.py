"""Pure decisions over plain data: how many workers and servers each job of a run gets (run-level policies, the
allocation rules, calibration planning), when a job stops, and what its history says.

DEFAULT_POLICY lives here, not beside the registry, so that the command line names it without importing the
policies (and with them numpy and scipy)."""

DEFAULT_POLICY = "coach"
