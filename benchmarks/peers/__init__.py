"""The peer servers ``python -m benchmarks.serve_peers`` measures tubeless serve against.

Each peer runs the scripted agent's work (``projects/scripted-agent.yaml``) with no model and
no network: ``scripted`` holds that work once; ``langgraph_graph`` wraps it as a LangGraph
graph for ``langgraph dev``; ``adk_agents/scripted`` as an ADK agent for ``adk api_server``.
These modules import their peer's library, so only the peer's own interpreter loads them.
"""
