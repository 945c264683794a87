"""The viewer's pages, one module each; each function returns a whole HTML document."""
