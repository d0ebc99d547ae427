"""Pure decisions over plain data: when a job stops (and, later, how many workers and servers it gets)."""
