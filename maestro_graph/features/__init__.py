"""What learned routers see of a question: sentence embeddings and cheap state features."""
