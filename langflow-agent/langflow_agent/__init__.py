"""Langflow adapter for the LangflowAgent LangBot runner."""
