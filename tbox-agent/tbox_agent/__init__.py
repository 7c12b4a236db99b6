"""Tbox adapter for the TboxAgent LangBot runner."""
