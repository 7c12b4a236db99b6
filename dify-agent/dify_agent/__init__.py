"""Dify Service API adapter for the DifyAgent LangBot runner."""
