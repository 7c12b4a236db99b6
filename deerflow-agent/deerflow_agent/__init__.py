"""DeerFlow adapter for the DeerFlowAgent LangBot runner."""
