// Tiny's own tests: a slim build never reads them (hermetic prunes tiny/test).
int main() { return 0; }
