"""Each tool's argument extractor, one module per tool, and their shared reading. No Django."""
