package ledger

import corev1 "k8s.io/api/core/v1"

// vec is a Resources packed by the ledger's resource index, so a fit check
// is a few slice reads instead of map lookups (it runs for every node of
// every scheduling cycle). Slots 0..2 are CPU (millicores), memory and Pods;
// later slots are scalar resources in the order the ledger first saw them.
// Missing trailing slots are zero.
type vec []int64

const (
	slotCPU = iota
	slotMemory
	slotPods
	firstScalar
)

func at(v vec, i int) int64 {
	if i < len(v) {
		return v[i]
	}
	return 0
}

func (v *vec) add(o vec) {
	for len(*v) < len(o) {
		*v = append(*v, 0)
	}
	for i, x := range o {
		(*v)[i] += x
	}
}

func (v *vec) sub(o vec) {
	for len(*v) < len(o) {
		*v = append(*v, 0)
	}
	for i, x := range o {
		(*v)[i] -= x
	}
}

// slot interns a resource name. Callers hold l.mu.
func (l *Ledger) slot(name corev1.ResourceName) int {
	switch name {
	case corev1.ResourceCPU:
		return slotCPU
	case corev1.ResourceMemory:
		return slotMemory
	case corev1.ResourcePods:
		return slotPods
	}
	if i, ok := l.slots[name]; ok {
		return i
	}
	i := firstScalar + len(l.slots)
	l.slots[name] = i
	l.names = append(l.names, name)
	return i
}

func (l *Ledger) slotName(i int) corev1.ResourceName {
	switch i {
	case slotCPU:
		return corev1.ResourceCPU
	case slotMemory:
		return corev1.ResourceMemory
	case slotPods:
		return corev1.ResourcePods
	}
	return l.names[i-firstScalar]
}

// pack converts r. Callers hold l.mu.
func (l *Ledger) pack(r Resources) vec {
	v := make(vec, firstScalar, firstScalar+len(r.Scalar))
	v[slotCPU], v[slotMemory], v[slotPods] = r.MilliCPU, r.Memory, r.Pods
	for name, x := range r.Scalar {
		i := l.slot(name)
		for len(v) <= i {
			v = append(v, 0)
		}
		v[i] = x
	}
	return v
}

func (l *Ledger) unpack(v vec) Resources {
	r := Resources{MilliCPU: at(v, slotCPU), Memory: at(v, slotMemory), Pods: at(v, slotPods)}
	for i := firstScalar; i < len(v); i++ {
		if r.Scalar == nil {
			r.Scalar = map[corev1.ResourceName]int64{}
		}
		r.Scalar[l.slotName(i)] = v[i]
	}
	return r
}

// fitsVec reports whether req (non-zero slots nz) fits alloc-used+extra,
// and which slot does not.
func fitsVec(alloc, used, extra, req vec, nz []int) (bool, int) {
	for _, i := range nz {
		if at(alloc, i)-at(used, i)+at(extra, i) < req[i] {
			return false, i
		}
	}
	return true, 0
}
