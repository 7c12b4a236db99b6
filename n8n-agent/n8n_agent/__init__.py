"""n8n adapter for the N8nAgent LangBot runner."""
