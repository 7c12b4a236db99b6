"""DashScope adapter for the DashScopeAgent LangBot runner."""
