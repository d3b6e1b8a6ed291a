"""One module per trace or request-file format; :func:`schedkit.workload.load_workload`
picks the parser from the file's suffix and first line."""
