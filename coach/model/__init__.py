"""Pure maths, no I/O: the cost model (and, later, the speed surface and the convergence curve)."""
