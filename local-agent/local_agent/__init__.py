"""LocalAgent: the in-process agent loop on LangBot's own models, tools and knowledge bases."""
