"""Path 1: an LLM that returns tool calls.

loop.py is the agent loop (no Django), with loop_events.py (its events), task_records.py
(its spans), loop_discovery.py (active discovery), spiral_breaker.py, planner_fallback.py
(the planner standing in) and replay_guard.py (no side effect twice); llm/ the LLM client
and the vendors' formats, token_budget.py the share of tokens that tool output may take,
replan.py and plan_agent.py plan-execute-replan, recall.py the built-in recall tool
(session_results.py its reads of the trace store), site_agents.py runs an Agent row with the
site's services, and sandbox_runner.py is the sandbox chat's runner.
"""
