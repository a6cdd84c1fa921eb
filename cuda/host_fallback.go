package cuda

import "megago/tensor"

// hostRun is one call of a fused kernel's host fallback (backend_fused_attention.go):
// inputs are copied to CPU backend storage (in), outputs are staged there (out) and
// copied back to the device by done.
type hostRun struct {
	b    *Backend
	cpu  tensor.Backend
	outs [][2]tensor.Span // device span, host span
}

// hostRun starts a host fallback call, counted in b.fallbacks.
func (b *Backend) hostRun() *hostRun {
	b.fallbacks.Add(1)
	return &hostRun{b: b, cpu: tensor.NewCPU().Backend()}
}

// alloc returns host storage shaped like s (empty for an empty s).
func (h *hostRun) alloc(s tensor.Span) tensor.Span {
	if s.Empty() {
		return s
	}
	return tensor.Span{Buf: h.cpu.Alloc(s.DType, s.Numel()), DType: s.DType, Shape: s.Shape}
}

// in returns a host copy of the device span s.
func (h *hostRun) in(s tensor.Span) tensor.Span {
	hs := h.alloc(s)
	if !s.Empty() {
		buf := make([]byte, s.Numel()*s.DType.Size())
		h.b.ReadHost(s, buf)
		h.cpu.WriteHost(hs, buf)
	}
	return hs
}

// out returns host storage for the device output s, copied back to s by done.
func (h *hostRun) out(s tensor.Span) tensor.Span {
	hs := h.alloc(s)
	if !s.Empty() {
		h.outs = append(h.outs, [2]tensor.Span{s, hs})
	}
	return hs
}

// done copies the outputs back to the device.
func (h *hostRun) done() {
	for _, o := range h.outs {
		buf := make([]byte, o[0].Numel()*o[0].DType.Size())
		h.cpu.ReadHost(o[1], buf)
		h.b.WriteHost(o[0], buf)
	}
}
