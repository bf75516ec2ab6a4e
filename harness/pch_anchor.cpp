// The translation unit that builds harness/pch.h once (parity_pch); every other
// target reuses the precompiled header.
