"""Operations: the fault, bad-input and trust suites, and the benchmark generator."""
