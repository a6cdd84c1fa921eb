// Package driver binds the CUDA driver API (libcuda): Driver with its device queries, GPU
// (a device's primary context and Bind, which makes it current on the calling thread),
// streams, events, memory, modules, kernel launches with KernelArgs, and CUDA graphs.
// Each method turns CUDA's result code into a *dl.Error. Package cuda's backend is built
// on it; nothing here is public API.
package driver
