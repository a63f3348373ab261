// cub_emu.h: the two pieces of CUB that cuda_sample.cu's host code uses, for the host CUDA
// emulator (emu.h): cub::DoubleBuffer and cub::DeviceSegmentedRadixSort::
// SortPairsDescending, as a stable std::sort per segment on the host. gen.py includes it
// in place of <cub/...>.
// Emulated: the sizing call (d_temp_storage NULL), stable descending order on the key bits
// [begin_bit, end_bit), the result in the other buffer of each DoubleBuffer (selector
// flipped, so code must read Current()), the output outside every segment left as
// garbage (0xff bytes), as CUB leaves it. Not emulated: CUB's kernels themselves (its
// own correctness is taken as given), temp storage contents, the stream.
#pragma once
#include "emu.h"

#include <algorithm>

namespace cub {
template <typename T> struct DoubleBuffer {
    T *d_buffers[2];
    int selector;
    DoubleBuffer(T *cur, T *alt) : d_buffers{cur, alt}, selector(0) {}
    T *Current() { return d_buffers[selector]; }
    T *Alternate() { return d_buffers[selector ^ 1]; }
};

struct DeviceSegmentedRadixSort {
    template <typename K, typename V, typename BI, typename EI>
    static cudaError_t SortPairsDescending(void *tmp, size_t &bytes, DoubleBuffer<K> &keys,
                                           DoubleBuffer<V> &vals, int items, int segs, BI beg,
                                           EI end, int begin_bit = 0,
                                           int end_bit = (int)sizeof(K) * 8, cudaStream_t = 0) {
        if (!tmp) {
            bytes = 64;
            return cudaSuccess;
        }
        if (items < 0 || segs < 0 || begin_bit < 0 || end_bit > (int)sizeof(K) * 8 ||
            begin_bit >= end_bit)
            return cudaErrorInvalidValue;
        const K *ki = keys.Current();
        const V *vi = vals.Current();
        K *ko = keys.Alternate();
        V *vo = vals.Alternate();
        memset(ko, 0xff, (size_t)items * sizeof(K));
        memset(vo, 0xff, (size_t)items * sizeof(V));
        const unsigned long long mask =
            (end_bit - begin_bit >= 64 ? ~0ull : ((1ull << (end_bit - begin_bit)) - 1))
            << begin_bit;
        std::vector<int> ord;
        for (int s = 0; s < segs; s++) {
            int b = beg[s], e = end[s];
            if (e <= b) continue;
            if (b < 0 || e > items) return cudaErrorInvalidValue;
            ord.resize((size_t)(e - b));
            for (int i = b; i < e; i++) ord[(size_t)(i - b)] = i;
            std::stable_sort(ord.begin(), ord.end(), [&](int x, int y) {
                return ((unsigned long long)ki[x] & mask) > ((unsigned long long)ki[y] & mask);
            });
            for (int i = b; i < e; i++) {
                ko[i] = ki[ord[(size_t)(i - b)]];
                vo[i] = vi[ord[(size_t)(i - b)]];
            }
        }
        keys.selector ^= 1;
        vals.selector ^= 1;
        return cudaSuccess;
    }
};
}  // namespace cub
