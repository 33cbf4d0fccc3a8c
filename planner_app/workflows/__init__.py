"""Path 3: workflows. graph.py defines and checks a DAG, executor.py runs it (both without
Django), workflow_runs.py runs a saved one with the site's services."""
