"""The HTTP service of a project (``tubeless serve``); ``protocols`` holds the AG-UI, A2A and
MCP-server adapters that mount on it."""
