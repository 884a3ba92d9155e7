"""The benchmark's scenarios; each returns (figures, detail)."""
