"""One episode: the LangGraph StateGraph (router, skill nodes, answer) and running it over tasks."""
