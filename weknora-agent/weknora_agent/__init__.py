"""WeKnora adapter for the WeKnoraAgent LangBot runner."""
