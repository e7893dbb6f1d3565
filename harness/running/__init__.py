"""Running cases: the runner, chunks, worker isolation, resources and placement on GPUs."""
