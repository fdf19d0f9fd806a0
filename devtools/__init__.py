"""Dev tools shared by the tests, the benchmarks and the GPU runner: real-server starters, roots, report writers."""
