"""The scripted agent as an ADK app (``adk api_server`` loads ``agent.root_agent``)."""

from . import agent as agent
