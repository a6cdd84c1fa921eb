package parallel

// grid is a mixed-radix layout of ranks over four axes, fastest first: a rank's
// coordinates c satisfy rank = c[0] + n[0]·(c[1] + n[1]·(c[2] + n[2]·c[3])). Both of the
// mesh's decompositions are grids over the same ranks: the dense one {TP, CP, DP, PP}
// (indexed by Axis) and the expert one {ETP, EP, EDP, PP} (indexed by ExpertAxis). It is
// what Megatron's RankGenerator computes with generate_masked_orthogonal_rank_groups.
// Callers check ranges; grid assumes every size ≥ 1.
type grid [4]int

// world returns the number of ranks.
func (n grid) world() int { return n[0] * n[1] * n[2] * n[3] }

// coord returns rank's coordinates.
func (n grid) coord(rank int) (c [4]int) {
	for a := range c {
		c[a], rank = rank%n[a], rank/n[a]
	}
	return c
}

// rank returns the rank at coordinates c.
func (n grid) rank(c [4]int) int {
	return c[0] + n[0]*(c[1]+n[1]*(c[2]+n[2]*c[3]))
}

// inRange reports whether every coordinate of c is in [0, size of its axis).
func (n grid) inRange(c [4]int) bool {
	for a := range c {
		if c[a] < 0 || c[a] >= n[a] {
			return false
		}
	}
	return true
}

// group lists the ranks whose coordinates equal c's on the axes outside mask (bit a
// for axis a), in increasing order: looping from the slowest axis to the fastest yields
// them sorted.
func (n grid) group(c [4]int, mask uint8) []int {
	var lo, hi [4]int
	size := 1
	for a := range c {
		lo[a], hi[a] = c[a], c[a]+1
		if mask&(1<<a) != 0 {
			lo[a], hi[a] = 0, n[a]
			size *= n[a]
		}
	}
	ranks := make([]int, 0, size)
	var x [4]int
	for x[3] = lo[3]; x[3] < hi[3]; x[3]++ {
		for x[2] = lo[2]; x[2] < hi[2]; x[2]++ {
			for x[1] = lo[1]; x[1] < hi[1]; x[1]++ {
				for x[0] = lo[0]; x[0] < hi[0]; x[0]++ {
					ranks = append(ranks, n.rank(x))
				}
			}
		}
	}
	return ranks
}

// leader returns the smallest rank of rank's group over mask: rank with its coordinates
// on those axes set to 0. It identifies the group.
func (n grid) leader(rank int, mask uint8) int {
	c := n.coord(rank)
	for a := range c {
		if mask&(1<<a) != 0 {
			c[a] = 0
		}
	}
	return n.rank(c)
}

// groups returns every group over mask, ordered by smallest member; together they
// partition the ranks.
func (n grid) groups(mask uint8) [][]int {
	var out [][]int
	for r := range n.world() {
		if n.leader(r, mask) == r {
			out = append(out, n.group(n.coord(r), mask))
		}
	}
	return out
}
