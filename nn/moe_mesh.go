package nn

import "megago/parallel"

// MeshExperts returns the expert groups of mesh m for Builder.Experts: its
// expert-parallel, expert-tensor-parallel and combined groups (m.EP(), m.ExpertTP(),
// m.ExpertTPEP()).
func MeshExperts(m *parallel.Mesh) ExpertGroups {
	return ExpertGroups{EP: m.EP(), TP: m.ExpertTP(), TPEP: m.ExpertTPEP()}
}
