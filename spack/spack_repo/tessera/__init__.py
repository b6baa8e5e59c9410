# The Python package of Tessera's Spack repository (namespace "tessera").
