"""Coze adapter for the CozeAgent LangBot runner."""
