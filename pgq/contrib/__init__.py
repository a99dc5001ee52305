"""Integrations with other frameworks, each in a subpackage that imports its framework; `import pgq`
imports none of them."""
