package kernels

import (
	"embed"
	"fmt"
	"slices"
)

// kernelFS holds the CUDA C sources: prelude.cu, prepended to every module, and one file
// per module.
//
//go:embed *.cu
var kernelFS embed.FS

// ReadFile returns the embedded source file name ("prelude.cu", "norm.cu", ...).
func ReadFile(name string) ([]byte, error) { return kernelFS.ReadFile(name) }

// A Module is one NVRTC compilation: a source file (after the prelude), text appended
// to it (template instantiations), and the kernels the Go side launches from it.
type Module struct {
	File    string // without ".cu"
	Extra   string
	Kernels []string
}

// AttentionHeadSizes returns the head sizes the fused attention kernels are built for.
func AttentionHeadSizes() []int { return []int{8, 16, 32, 64, 128} }

// Modules returns every module by name. The fused attention kernels are one module per
// (dtype, head size), compiled only when used.
func Modules() map[string]Module {
	m := map[string]Module{
		"elementwise": {File: "elementwise", Kernels: []string{"fill64", "arange", "cast", "copy_strided_2",
			"copy_strided_4", "copy_strided_8", "random_fill", "unary_f", "unary_d", "unary_bwd_f", "unary_bwd_d",
			"binary_f", "binary_d", "where", "accumulate_grad", "bias_act_f", "bias_act_d", "bias_act_bwd_f",
			"bias_act_bwd_d"}},
		"reduce": {File: "reduce", Kernels: []string{"reduce_rows_f", "reduce_rows_d", "reduce_cols_f", "reduce_cols_d",
			"max_dim_f", "max_dim_d", "gather", "scatter_add", "sumsq_partial", "sumsq_finish", "colsum_partial",
			"colsum_finish"}},
		"softmax": {File: "softmax", Kernels: []string{"softmax_f", "softmax_d", "softmax_bwd_f", "softmax_bwd_d"}},
		"norm": {File: "norm", Kernels: []string{"norm_fwd_f", "norm_fwd_d", "norm_bwd_f", "norm_bwd_d",
			"norm_wgrad_partial", "norm_wgrad_finish"}},
		"embed": {File: "embed", Kernels: []string{"embedding_2", "embedding_4", "embedding_8", "embedding_bwd",
			"encoder", "encoder_bwd", "ce_fwd_f", "ce_fwd_d", "ce_bwd_f", "ce_bwd_d", "vce_stats", "vce_loss",
			"vce_bwd"}},
		"optim": {File: "optim", Kernels: []string{"adam_f", "adam_d", "sgd_f", "sgd_d"}},
		"fused": {File: "fused", Kernels: []string{"bias_dropout_add_f", "bias_dropout_add_d", "dropout_bwd_f",
			"dropout_bwd_d", "swiglu_f", "swiglu_d", "swiglu_bwd_f", "swiglu_bwd_d", "rope_f", "rope_d"}},
	}
	for _, dt := range []string{"bf16", "f32"} {
		for _, hs := range AttentionHeadSizes() {
			name := AttentionModule(dt, hs)
			m[name] = Module{
				File:  "attention",
				Extra: fmt.Sprintf("FLASH(%s, %sS, %d)\n", dt, map[string]string{"bf16": "BF16", "f32": "F32"}[dt], hs),
				Kernels: []string{fmt.Sprintf("flash_fwd_%s_%d", dt, hs), fmt.Sprintf("flash_fwd_slots_%s_%d", dt, hs),
					fmt.Sprintf("flash_bwd_dkdv_%s_%d", dt, hs), fmt.Sprintf("flash_bwd_dq_%s_%d", dt, hs),
					"flash_bwd_pre_" + dt, "attn_dbias"},
			}
		}
	}
	return m
}

// AttentionModule names the fused attention module for a dtype ("bf16", "f32") and head
// size.
func AttentionModule(dt string, hs int) string { return fmt.Sprintf("attention_%s_%d", dt, hs) }

// Names returns the modules' names, sorted.
func Names() []string {
	var names []string
	for n := range Modules() {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Source returns the source NVRTC compiles for module name: the prelude, the module's
// file and its extra text. It panics if the module does not exist (a bug in package
// cuda).
func Source(name string) string {
	mod, ok := Modules()[name]
	if !ok {
		panic(fmt.Sprintf("cuda: no kernel module %q", name))
	}
	pre, err := kernelFS.ReadFile("prelude.cu")
	if err != nil {
		panic(fmt.Sprintf("cuda: embedded prelude: %v", err))
	}
	body, err := kernelFS.ReadFile(mod.File + ".cu")
	if err != nil {
		panic(fmt.Sprintf("cuda: embedded %s.cu: %v", mod.File, err))
	}
	return string(pre) + "\n#line 1 \"" + mod.File + ".cu\"\n" + string(body) + mod.Extra
}

// compileOptions returns NVRTC's options for a real (sm_XX, CUBIN) or virtual
// (compute_XX, PTX) architecture.
func compileOptions(arch int, real bool) []string {
	kind := "compute"
	if real {
		kind = "sm"
	}
	return []string{fmt.Sprintf("--gpu-architecture=%s_%d", kind, arch), "--std=c++14", "-default-device"}
}

// chooseTarget picks what to compile for a device of compute capability arch (e.g. 90)
// with an NVRTC that supports the real architectures supported: a CUBIN for arch itself
// when NVRTC knows it, else PTX for the newest architecture NVRTC knows that is not newer
// than the device (the driver compiles PTX for newer GPUs). An empty list (an NVRTC
// older than 11.2) gives PTX for arch. It returns ok = false when every supported
// architecture is newer than the device.
func chooseTarget(arch int, supported []int) (target int, real, ok bool) {
	if len(supported) == 0 {
		return arch, false, true
	}
	if slices.Contains(supported, arch) {
		return arch, true, true
	}
	best := -1
	for _, a := range supported {
		if a <= arch && a > best {
			best = a
		}
	}
	return best, false, best >= 0
}
