"""The bundled benchmark: runs on compute nodes, imports only torch and the standard library."""
