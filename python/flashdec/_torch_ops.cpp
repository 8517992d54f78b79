// _torch_ops.cpp — the CPU and CUDA kernels of torch.ops.flashdec.decode, decode_into, decode_batch and
// decode_batch_into in C++, so that a repeated call costs the dispatcher's few microseconds, not Python's.
//
// ops.py's Python functions are the one place of the checks and of how tensors become flashdec's layer and batch
// structs; each kernel here is a memo over them. The one rule this file repeats is theirs for plain K/V views, whose
// two layer strides are the tensor's (plain_strides: so that a cache that is a new tensor every step keeps its copy). It keys a call by what
// its structs depend on (every tensor's shape, strides, dtype and device, the scalar arguments, the per-head arrays'
// addresses, the current stream), and
//   - on a hit, checks what the key leaves out (seq_len against the rows, lse, the token counts on the CPU), sets the
//     call's data pointers and calls the library through the function pointers ops.py handed over (flashdec::_bind);
//   - on a miss, or where the hit's checks or the library refuse the call, calls ops.py's set-up operator
//     (flashdec::_decode_setup, _decode_batch_setup), which checks everything, makes the call (or raises the error
//     the Python path raises) and returns the addresses of the structs it used, which are copied here for the next
//     call; an empty list where the call cannot be repeated from a copy (per-head arrays converted for the call).
// The library refuses bad input before writing anything, so a refused hit that is retried through the set-up
// writes its output once.
//
// ops.py builds this file with torch.utils.cpp_extension (no CUDA headers: a CUDA stream is known by its id).
#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstring>
#include <unordered_map>
#include <vector>

namespace {

using Key = std::vector<int64_t>;
using OptT = std::optional<at::Tensor>;
using OptStr = std::optional<c10::string_view>;

// The library's entry points and its structs' geometry, from ops.py (flashdec::_bind); null until then.
struct Bound {
    int (*decode)(void *ctx, const void *layer, uint32_t seq_len, const void *q, const void *k, const void *v,
                  void *out, float *lse);
    int (*decode_batch)(void *ctx, const void *layer, const void *batch, const void *q, const void *k,
                        const void *v, void *out, float *lse);
    size_t layer_size, batch_size, off_seq_lens, off_q_lens, off_page_table, off_pos_stride, off_head_stride;
} bound;

struct KeyHash {
    size_t operator()(const Key &k) const {
        uint64_t h = 1469598103934665603ull;
        for (int64_t x : k) h = (h ^ (uint64_t)x) * 1099511628211ull;
        return (size_t)h;
    }
};

// A call's structs as the set-up made them: layer (and batch) bytes, the context.
struct Setup {
    std::vector<unsigned char> layer, batch;
    void *ctx = nullptr;
};

// Per thread, as ops.py's contexts are (a context serves one thread at a time); bounded as ops.py's cache is.
struct Memo {
    std::unordered_map<Key, Setup, KeyHash> map;
    int64_t hits = 0, patched = 0, setups = 0; /* calls served from a copy, from a copy with k's strides, by ops.py */
    Setup *find(const Key &k) {
        auto it = map.find(k);
        return it == map.end() ? nullptr : &it->second;
    }
    void put(Key k, Setup s) {
        if (map.size() >= 256) map.clear();
        map[std::move(k)] = std::move(s);
    }
};
thread_local Memo memo;

int64_t bits(double x) {
    int64_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
}

void add_tensor(Key &k, const at::Tensor &t, bool rows, bool strides = true) {
    k.push_back(t.dim());
    k.push_back((int64_t)t.scalar_type());
    k.push_back((int64_t)t.device().type());
    k.push_back(t.device().index());
    for (int64_t d = rows ? 0 : 1; d < t.dim(); d++) k.push_back(t.size(d));
    if (strides)
        for (int64_t d = 0; d < t.dim(); d++) k.push_back(t.stride(d));
    else
        k.push_back(-1); /* a key without strides is never one with them */
}

// k and v [rows][kv_heads][dim] of an element type (not uint8 block storage) with several rows and KV heads, alike,
// the dim contiguous: ops.py's _layer_from then takes the layer's two strides as k's strides are. A set-up made for other strides serves such a call with them
// written in: a DynamicCache's tensor is a new one every step, its rows longer, so its strides change every call.
bool plain_strides(const at::Tensor &k, const at::Tensor &v) {
    return k.dim() == 3 && v.dim() == 3 && k.sizes() == v.sizes() && k.strides() == v.strides() && k.size(0) > 1 &&
           k.size(1) > 1 && k.stride(2) == 1 && k.stride(0) > 0 && k.stride(1) > 0;
}

// An optional tensor the set-up may keep by address (per-head arrays: it keeps them only where it reads them in place).
void add_pointer(Key &k, const OptT &t) {
    if (!t.has_value()) {
        k.push_back(0);
        return;
    }
    add_tensor(k, *t, true);
    k.push_back((int64_t)(uintptr_t)t->data_ptr());
}

// An optional index tensor (lengths, pages): its description only; its address is set anew for each call.
void add_index(Key &k, const OptT &t) {
    k.push_back(t.has_value());
    if (t.has_value()) add_tensor(k, *t, true), k.push_back(t->is_contiguous());
}

void add_stream(Key &k, const at::Tensor &q) {
    if (q.is_cuda()) {
        const c10::Stream s = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(q.device());
        k.push_back(s.id());
    } else {
        k.push_back(-1);
    }
}

void add_str(Key &k, const OptStr &s) {
    k.push_back(s.has_value() ? (int64_t)std::hash<std::string>()(std::string(s->data(), s->size())) : 0);
}

bool lse_ok(const OptT &lse, const at::Tensor &q, int64_t rows, int64_t H) {
    if (!lse.has_value()) return true;
    const at::Tensor &l = *lse;
    const bool shape = rows < 0 ? l.dim() == 1 && l.size(0) == H : l.dim() == 2 && l.size(0) == rows && l.size(1) == H;
    return shape && l.scalar_type() == at::kFloat && l.is_contiguous() && l.device() == q.device();
}

void store(const std::vector<int64_t> &addr, Key key, bool batch) { /* addr: the set-up operator's answer */
    if (addr.size() != (batch ? 3u : 2u)) return; // not to be repeated from a copy
    Setup s;
    const auto *lay = reinterpret_cast<const unsigned char *>((uintptr_t)addr[0]);
    s.layer.assign(lay, lay + bound.layer_size);
    if (batch) {
        const auto *b = reinterpret_cast<const unsigned char *>((uintptr_t)addr[1]);
        s.batch.assign(b, b + bound.batch_size);
    }
    s.ctx = reinterpret_cast<void *>((uintptr_t)addr.back());
    memo.put(std::move(key), std::move(s));
}

// ---- decode ----

void decode_into(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, c10::SymInt seq_len_s,
                 int64_t window, int64_t ring_capacity, double scale, double softcap, const OptT &sinks,
                 const OptT &alibi_slopes, double k_scale, double v_scale, const OptT &k_scales,
                 const OptT &v_scales, OptStr kv_dtype, int64_t threads, const at::Tensor &out, const OptT &lse) {
    const int64_t seq_len = seq_len_s.expect_int();
    // the rows of k and v are not in the key (a growing cache keeps its set-up): checked below
    auto describe = [&](bool kv_strides) {
        Key key;
        key.reserve(64);
        add_tensor(key, q, true), add_tensor(key, k, false, kv_strides), add_tensor(key, v, false, kv_strides);
        add_tensor(key, out, true);
        key.push_back(k.dim() >= 1 && k.size(0) > 1); // one row: its row stride is not the layer's
        add_stream(key, q);
        for (int64_t x : {window, ring_capacity, bits(scale), bits(softcap), bits(k_scale), bits(v_scale), threads})
            key.push_back(x);
        add_str(key, kv_dtype);
        for (const OptT *t : {&sinks, &alibi_slopes, &k_scales, &v_scales}) add_pointer(key, *t);
        return key;
    };
    Key key = describe(true);
    const bool plain = !kv_dtype.has_value() && plain_strides(k, v); // (block storage's strides are not k's)
    Key shape_key; /* the key without k's and v's strides, made only where the full key misses */
    const int64_t need = ring_capacity ? ring_capacity : seq_len;
    if (bound.decode && seq_len >= 1 && seq_len <= UINT32_MAX && k.dim() >= 1 && v.dim() >= 1 &&
        k.size(0) >= need && v.size(0) == k.size(0) && lse_ok(lse, q, -1, q.dim() == 2 ? q.size(0) : -1)) {
        Setup *s = memo.find(key);
        const bool patched = !s && plain && (s = memo.find(shape_key = describe(false)));
        if (patched) { // the same call but for k's strides: written into this thread's copy
            const size_t ps = (size_t)k.stride(0), hs = (size_t)k.stride(1);
            std::memcpy(s->layer.data() + bound.off_pos_stride, &ps, sizeof ps);
            std::memcpy(s->layer.data() + bound.off_head_stride, &hs, sizeof hs);
        }
        if (s && bound.decode(s->ctx, s->layer.data(), (uint32_t)seq_len, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                              out.data_ptr(), lse.has_value() ? lse->data_ptr<float>() : nullptr) == 0) {
            (patched ? memo.patched : memo.hits)++;
            return;
        }
    }
    static auto setup = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("flashdec::_decode_setup", "")
                            .typed<std::vector<int64_t>(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                                        c10::SymInt, int64_t, int64_t, double, double, const OptT &,
                                                        const OptT &, double, double, const OptT &, const OptT &,
                                                        OptStr, int64_t, const at::Tensor &, const OptT &)>();
    memo.setups++;
    const std::vector<int64_t> made = setup.call(q, k, v, seq_len_s, window, ring_capacity, scale, softcap, sinks,
                                                 alibi_slopes, k_scale, v_scale, k_scales, v_scales, kv_dtype, threads,
                                                 out, lse);
    store(made, std::move(key), false);
    if (plain) store(made, shape_key.empty() ? describe(false) : std::move(shape_key), false);
}

std::tuple<at::Tensor, at::Tensor> decode(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                          c10::SymInt seq_len, int64_t window, int64_t ring_capacity, double scale,
                                          double softcap, const OptT &sinks, const OptT &alibi_slopes, double k_scale,
                                          double v_scale, const OptT &k_scales, const OptT &v_scales, OptStr kv_dtype,
                                          int64_t threads) {
    TORCH_CHECK_VALUE(q.dim() == 2, "q must be [num_q_heads, head_dim], got shape ", q.sizes());
    at::Tensor out = at::empty(q.sizes(), q.options());
    at::Tensor lse = at::empty({q.size(0)}, q.options().dtype(at::kFloat));
    decode_into(q, k, v, std::move(seq_len), window, ring_capacity, scale, softcap, sinks, alibi_slopes, k_scale,
                v_scale, k_scales, v_scales, kv_dtype, threads, out, lse);
    return {out, lse};
}

// ---- decode_batch ----

void decode_batch_into(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &seq_lens,
                       const OptT &q_lens, const OptT &page_table, int64_t window, double scale, double softcap,
                       const OptT &sinks, const OptT &alibi_slopes, c10::SymInt max_seq_len_s, int64_t max_q_len,
                       int64_t threads, const at::Tensor &out, const OptT &lse) {
    const int64_t max_seq_len = max_seq_len_s.expect_int();
    Key key;
    key.reserve(96);
    add_tensor(key, q, true), add_tensor(key, k, true), add_tensor(key, v, true), add_tensor(key, out, true);
    add_index(key, seq_lens), add_index(key, q_lens), add_index(key, page_table);
    add_stream(key, q);
    for (int64_t x : {window, bits(scale), bits(softcap), max_seq_len, max_q_len, threads}) key.push_back(x);
    for (const OptT *t : {&sinks, &alibi_slopes}) add_pointer(key, *t);
    if (bound.decode_batch) {
        Setup *s = memo.find(key);
        bool ok = s && q.dim() == 3 && lse_ok(lse, q, q.size(0), q.size(1));
        if (ok && !q.is_cuda() && q_lens.has_value()) { // on the CPU the token counts must add up to q's rows
            int64_t rows = 0; // a hit's token counts are as ops.py caches them: 32-bit, contiguous
            const uint32_t *n = static_cast<const uint32_t *>(q_lens->data_ptr());
            for (int64_t i = 0; i < q_lens->numel(); i++) rows += n[i];
            ok = rows == q.size(0);
        }
        if (ok) { // this call's lengths and pages, written into this thread's copy of the batch struct
            auto set = [&](size_t off, const OptT &t) {
                void *p = t.has_value() ? t->data_ptr() : nullptr;
                std::memcpy(s->batch.data() + off, &p, sizeof p);
            };
            set(bound.off_seq_lens, seq_lens), set(bound.off_q_lens, q_lens), set(bound.off_page_table, page_table);
            if (bound.decode_batch(s->ctx, s->layer.data(), s->batch.data(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                   out.data_ptr(), lse.has_value() ? lse->data_ptr<float>() : nullptr) == 0) {
                memo.hits++;
                return;
            }
        }
    }
    static auto setup = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("flashdec::_decode_batch_setup", "")
                            .typed<std::vector<int64_t>(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                                        const at::Tensor &, const OptT &, const OptT &, int64_t,
                                                        double, double, const OptT &, const OptT &, c10::SymInt,
                                                        int64_t, int64_t, const at::Tensor &, const OptT &)>();
    memo.setups++;
    store(setup.call(q, k, v, seq_lens, q_lens, page_table, window, scale, softcap, sinks, alibi_slopes,
                     max_seq_len_s, max_q_len, threads, out, lse),
          std::move(key), true);
}

std::tuple<at::Tensor, at::Tensor> decode_batch(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                                                const at::Tensor &seq_lens, const OptT &q_lens,
                                                const OptT &page_table, int64_t window, double scale, double softcap,
                                                const OptT &sinks, const OptT &alibi_slopes, c10::SymInt max_seq_len,
                                                int64_t max_q_len, int64_t threads) {
    TORCH_CHECK_VALUE(q.dim() == 3, "q must be [rows, num_q_heads, head_dim], got shape ", q.sizes());
    at::Tensor out = at::empty(q.sizes(), q.options());
    at::Tensor lse = at::empty({q.size(0), q.size(1)}, q.options().dtype(at::kFloat));
    decode_batch_into(q, k, v, seq_lens, q_lens, page_table, window, scale, softcap, sinks, alibi_slopes,
                      std::move(max_seq_len), max_q_len, threads, out, lse);
    return {out, lse};
}

// flashdec::_bind(fns): ops.py hands over the library's entry points and its structs' geometry (ctypes knows them):
// [fdec_decode, fdec_decode_batch, sizeof layer, sizeof batch, offsets of batch.seq_lens, q_lens, page_table,
// offsets of layer.kv_pos_stride, kv_head_stride].
void bind(c10::ArrayRef<int64_t> a) {
    TORCH_CHECK_VALUE(a.size() == 9, "flashdec::_bind takes 9 values, got ", a.size());
    bound.decode = reinterpret_cast<decltype(bound.decode)>((uintptr_t)a[0]);
    bound.decode_batch = reinterpret_cast<decltype(bound.decode_batch)>((uintptr_t)a[1]);
    bound.layer_size = (size_t)a[2], bound.batch_size = (size_t)a[3];
    bound.off_seq_lens = (size_t)a[4], bound.off_q_lens = (size_t)a[5], bound.off_page_table = (size_t)a[6];
    bound.off_pos_stride = (size_t)a[7], bound.off_head_stride = (size_t)a[8];
}

} // namespace

// flashdec::_memo_stats(): this thread's calls so far served from a copy, from a copy with k's strides written in, and
// through ops.py's set-up (for the tests, which check that repeated calls take the copies).
std::vector<int64_t> memo_stats() { return {memo.hits, memo.patched, memo.setups}; }

TORCH_LIBRARY_FRAGMENT(flashdec, m) {
    m.def("_bind(int[] fns) -> ()", bind);
    m.def("_memo_stats() -> int[]", memo_stats);
}

TORCH_LIBRARY_IMPL(flashdec, CPU, m) {
    m.impl("decode", decode), m.impl("decode_into", decode_into);
    m.impl("decode_batch", decode_batch), m.impl("decode_batch_into", decode_batch_into);
}

TORCH_LIBRARY_IMPL(flashdec, CUDA, m) {
    m.impl("decode", decode), m.impl("decode_into", decode_into);
    m.impl("decode_batch", decode_batch), m.impl("decode_batch_into", decode_batch_into);
}
