// Package zipf draws integers from a Zipf distribution over [1, n] with any
// exponent s > 0, P(k) proportional to 1/k^s, in O(1) time and memory per
// draw, for test streams and the synthetic source.
//
// math/rand's Zipf requires s > 1; the skews of real traffic (s = 0.8 to 1.4)
// need both sides of 1. This is rejection-inversion sampling: W. Hörmann and
// G. Derflinger, "Rejection-inversion to generate variates from monotone
// discrete distributions", ACM TOMACS 6(3), 1996, as in Apache Commons RNG's
// RejectionInversionZipfSampler. Output is exact (not an approximation of the
// distribution) and deterministic for a seed.
package zipf

import (
	"math"
	"math/rand/v2"
)

// Zipf is a seeded Zipf(s) generator over [1, n]. Not safe for concurrent use.
type Zipf struct {
	rng                     *rand.Rand
	n                       float64
	s                       float64
	hIntegralX1, hIntegralN float64
	sConst                  float64
}

// New returns a generator. It panics unless n >= 1 and s > 0.
func New(seed uint64, s float64, n uint64) *Zipf {
	if n < 1 || !(s > 0) {
		panic("zipf: need n >= 1 and s > 0")
	}
	z := &Zipf{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), n: float64(n), s: s}
	z.hIntegralX1 = z.hIntegral(1.5) - 1
	z.hIntegralN = z.hIntegral(z.n + 0.5)
	z.sConst = 2 - z.hIntegralInverse(z.hIntegral(2.5)-z.h(2))
	return z
}

// Next returns the next draw in [1, n]; 1 is the most frequent.
func (z *Zipf) Next() uint64 {
	for {
		u := z.hIntegralN + z.rng.Float64()*(z.hIntegralX1-z.hIntegralN)
		x := z.hIntegralInverse(u)
		k := math.Floor(x + 0.5)
		if k < 1 {
			k = 1
		} else if k > z.n {
			k = z.n
		}
		if k-x <= z.sConst || u >= z.hIntegral(k+0.5)-z.h(k) {
			return uint64(k)
		}
	}
}

// Float64 exposes the generator's uniform source (for jitter in generators).
func (z *Zipf) Float64() float64 { return z.rng.Float64() }

func (z *Zipf) h(x float64) float64 { return math.Exp(-z.s * math.Log(x)) }

func (z *Zipf) hIntegral(x float64) float64 {
	lx := math.Log(x)
	return helper2((1-z.s)*lx) * lx
}

func (z *Zipf) hIntegralInverse(x float64) float64 {
	t := x * (1 - z.s)
	if t < -1 {
		t = -1 // numerical safety at the edge
	}
	return math.Exp(helper1(t) * x)
}

// helper1 is log1p(x)/x, accurate near 0.
func helper1(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Log1p(x) / x
	}
	return 1 - x*(0.5-x*(1.0/3-0.25*x))
}

// helper2 is (exp(x)-1)/x, accurate near 0.
func helper2(x float64) float64 {
	if math.Abs(x) > 1e-8 {
		return math.Expm1(x) / x
	}
	return 1 + x*0.5*(1+x*(1.0/3)*(1+0.25*x))
}
