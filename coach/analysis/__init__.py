"""What a run's records say: statistics of job completion times (tests, effects, power) and plots.

DEFAULT_TEST lives here, not beside the tests, so that the command line names it without importing scipy."""

DEFAULT_TEST = "welch"
