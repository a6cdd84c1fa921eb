// Package gorgonia converts between megago tensors and gorgonia.org/tensor dense tensors, and
// holds the tests that check megago's autograd against gorgonia.org/gorgonia's symbolic
// differentiation.
//
// It is a separate package so that the core, megago/tensor, does not import gorgonia:
// gorgonia and its dependencies run init-time checks (go4.org/unsafe/assume-no-moving-gc
// panics on Go releases it does not know) and pull in a large dependency tree, which every
// user of the core would otherwise pay for. Only programs and tests that import this package
// do.
//
// The two functions, in reading order:
//
//   - ToDense copies a megago tensor to a row-major *gtensor.Dense of the same shape.
//   - FromDense copies a *gtensor.Dense (any layout: transposed, sliced or column-major) to a
//     new megago tensor on a device.
//
// Invariants: neither function shares memory between its input and its output, so either
// side may be modified or released afterwards. Neither records an autograd graph.
//
// Errors: ToDense panics on what only a caller bug can cause (a released tensor, a tensor
// with no elements); FromDense returns an error for a dense tensor whose dtype megago has no
// type for, since such tensors come from outside data.
package gorgonia
