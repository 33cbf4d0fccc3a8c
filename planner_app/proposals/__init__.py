"""Proposals: changes to the planner's rules, mappings and workflows, mined from recorded traffic.

traffic.py reads what was recorded; rules.py, mappings.py and chains.py turn it into
candidates; candidates.py backtests each on the recorded requests; store.py keeps them as
Proposal rows that operators apply (a new rule-set version) or dismiss.
"""
