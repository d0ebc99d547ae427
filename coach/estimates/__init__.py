"""Pure maths, no I/O: what a job's training will cost and how fast it goes — the cost model, the speed surface
fitted over (workers, servers), the convergence curve, epochs to target and the batch-size rule."""
