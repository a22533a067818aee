"""The machine and the install: what CPU and library versions a result came from (``environment``)
and which install extra brings which package (``extras``). Stdlib only."""
