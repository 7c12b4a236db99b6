"""LICOS adapter for the LicosAgent LangBot runner."""
