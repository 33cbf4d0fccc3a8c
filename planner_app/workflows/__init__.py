"""Path 3: workflows. graph.py is the DAG core (no Django); runs.py runs a saved one."""
