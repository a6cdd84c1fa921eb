package main

// The GPU backend registers itself as "cuda" with package tensor (bench gpt --device
// cuda); on a machine without a GPU or CUDA libraries opening it returns an error.
import _ "megago/cuda"
