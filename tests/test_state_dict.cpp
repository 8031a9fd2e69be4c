// Named, sliced state (trainrun/checkpoint/state_dict.h) and resharding through it: the boxes of
// a flat range, a state saved by one world size read back by every rank of another (ZeRO-1's
// shards and the model's whole tensors), a box that is no flat range (a tensor-parallel column
// block), and the refusals: slices of ranks that leave a gap or overlap, a checkpoint of another
// model.
#include <numeric>

#include "../src/checkpoint/box_copy.h"
#include "checkpoint_support.h"  // the includes and helpers these tests share

using namespace trainrun;
using namespace trainrun::checkpoint_test;

namespace {

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t x : shape) n *= x;
  return n;
}

// The row-major flat indices of a box's elements, in the box's own row-major order.
std::vector<int64_t> flat_indices(const std::vector<int64_t>& shape, const Box& b) {
  std::vector<int64_t> out;
  const size_t rank = shape.size();
  if (rank == 0) return {0};
  std::vector<int64_t> idx(rank, 0);
  for (int64_t k = 0; k < box_numel(b); ++k) {
    int64_t at = 0;
    for (size_t d = 0; d < rank; ++d) at = at * shape[d] + b.offsets[d] + idx[d];
    out.push_back(at);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < b.sizes[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// A model of several tensor shapes, with padding between tensors as ParamStore aligns them.
CheckpointData model_state(int64_t step, uint32_t seed) {
  CheckpointData d;
  d.params = {{"wte", {13, 7}, 0},
              {"blocks.0.attn.qkv.bias", {9}, 93},
              {"blocks.0.mlp.fc.weight", {6, 5}, 102},
              {"odd", {3, 4, 5}, 136},
              {"scalar", {1}, 196}};
  const size_t n = 197;  // no padding at the end: a single file holds none
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (auto* v : {&d.weights, &d.adam_m, &d.adam_v}) {
    v->assign(n, 0.0f);
    for (float& x : *v) x = normal(rng);
  }
  d.state.step = step;
  d.state.seed = 7;
  d.state.config_yaml = "model: {}\n";
  return d;
}

// The flat elements `range` of `flat`: the tensors' elements, `fill` in padding.
StateBuffer expected(const CheckpointData& d, const StateBuffer& flat, Shard range, float fill) {
  StateBuffer out(static_cast<size_t>(range.size()), fill);
  for (const ParamEntry& p : d.params)
    for (int64_t i = std::max(p.offset, range.begin);
         i < std::min(p.offset + numel(p.shape), range.end); ++i)
      out[static_cast<size_t>(i - range.begin)] = flat[static_cast<size_t>(i)];
  return out;
}

}  // namespace

TEST_CASE("boxes_of_flat_range: every range of small shapes is contiguous boxes, in order") {
  const std::vector<std::vector<int64_t>> shapes = {{1},       {7},          {1, 1},      {1, 5},
                                                    {5, 1},    {3, 4},       {2, 3, 4},   {3, 1, 2},
                                                    {2, 2, 2}, {1, 3, 1, 2}, {2, 3, 2, 3}};
  for (const auto& shape : shapes) {
    CAPTURE(box_str(whole(shape)));
    const int64_t n = numel(shape);
    for (int64_t begin = 0; begin <= n; ++begin)
      for (int64_t end = begin; end <= n; ++end) {
        CAPTURE(begin);
        CAPTURE(end);
        const std::vector<Box> boxes = boxes_of_flat_range(shape, begin, end);
        // Walking the boxes' elements in order gives exactly begin, begin + 1, ..., end - 1: so
        // each box is one contiguous run, they are in order, disjoint, and together the range.
        std::vector<int64_t> walked;
        bool inside = true, runs = true;
        for (const Box& b : boxes) {
          REQUIRE(b.offsets.size() == shape.size());
          REQUIRE(b.sizes.size() == shape.size());
          for (size_t d = 0; d < shape.size(); ++d)
            inside = inside && b.sizes[d] > 0 && b.offsets[d] >= 0 &&
                     b.offsets[d] + b.sizes[d] <= shape[d];
          if (!inside) break;
          const std::vector<int64_t> idx = flat_indices(shape, b);
          runs = runs && idx.back() - idx.front() + 1 == box_numel(b) &&
                 flat_start(shape, b) == idx.front() && contiguous_within(b, whole(shape));
          walked.insert(walked.end(), idx.begin(), idx.end());
        }
        REQUIRE(inside);
        CHECK(runs);
        std::vector<int64_t> want(static_cast<size_t>(end - begin));
        std::iota(want.begin(), want.end(), begin);
        CHECK(walked == want);
        // At most a partial box per dimension on each side and the full ones between.
        CHECK(boxes.size() <= 2 * shape.size() - 1);
      }
  }
  CHECK_THROWS_AS(boxes_of_flat_range({3, 4}, 5, 13), std::invalid_argument);
  CHECK_THROWS_AS(boxes_of_flat_range({3, 4}, 6, 5), std::invalid_argument);
}

TEST_CASE("a state saved by 1, 2, 3 or 5 ranks is read back by every rank of 1, 2, 3 or 4") {
  const CheckpointData d = model_state(12, 3);
  const int64_t n = static_cast<int64_t>(d.weights.size());
  // The folder of each world size, and the single file `export` writes (read the same way).
  for (int saved : {1, 2, 3, 5, 0}) {
    CAPTURE(saved);
    TempDir tmp;
    std::string path;
    if (saved > 0) {
      path = save_folder(tmp.str(), d, saved);
    } else {
      save_direct(tmp.str(), d);
      path = single_file_checkpoint_path(tmp.str(), 12);
    }
    for (int world : {1, 2, 3, 4})
      for (int rank = 0; rank < world; ++rank) {
        CAPTURE(world);
        CAPTURE(rank);
        TrainState st;
        std::unique_ptr<StateSource> src = open_checkpoint(path, &st);
        CHECK(st.step == 12);
        // ZeRO-1: this rank's shard of the moments; the model: every weight.
        const Shard mine = shard_of(n, world, rank);
        StateBuffer m(static_cast<size_t>(mine.size()), -3.0f), v = m;
        read_flat_state(*src, "optimizer/m", d.params, mine, m.data());
        read_flat_state(*src, "optimizer/v", d.params, mine, v.data());
        CHECK(same_bits(m, expected(d, d.adam_m, mine, -3.0f)));
        CHECK(same_bits(v, expected(d, d.adam_v, mine, -3.0f)));
        StateBuffer w(static_cast<size_t>(n), -3.0f);
        read_flat_state(*src, "model", d.params, {0, n}, w.data());
        CHECK(same_bits(w, expected(d, d.weights, {0, n}, -3.0f)));
      }
  }
}

TEST_CASE("a box that is no flat range (a tensor-parallel block) reads back exactly") {
  const CheckpointData d = model_state(4, 5);
  for (int saved : {1, 3}) {
    CAPTURE(saved);
    TempDir tmp;
    const std::string dir = save_folder(tmp.str(), d, saved);
    std::unique_ptr<StateSource> src = open_checkpoint(dir, nullptr);
    struct Ask {
      const char* tensor;
      const ParamEntry* p;
      Box box;
    };
    const std::vector<Ask> asks = {
        {"model/wte", &d.params[0], {{0, 2}, {13, 3}}},             // a column block
        {"optimizer/m/wte", &d.params[0], {{4, 6}, {7, 1}}},        // one column, some rows
        {"optimizer/v/odd", &d.params[3], {{1, 0, 2}, {2, 4, 2}}},  // a 3-D block
        {"model/blocks.0.mlp.fc.weight", &d.params[2], {{0, 0}, {6, 5}}}};
    std::vector<StateBuffer> outs;
    std::vector<SliceRequest> requests;
    for (const Ask& a : asks) outs.emplace_back(static_cast<size_t>(box_numel(a.box)), -1.0f);
    for (size_t i = 0; i < asks.size(); ++i)
      requests.push_back({asks[i].tensor, asks[i].box, outs[i].data()});
    src->read(requests);
    for (size_t i = 0; i < asks.size(); ++i) {
      CAPTURE(asks[i].tensor);
      const std::string t = asks[i].tensor;
      const StateBuffer& flat = t.starts_with("model/")         ? d.weights
                                : t.starts_with("optimizer/m/") ? d.adam_m
                                                                : d.adam_v;
      StateBuffer want;
      for (int64_t at : flat_indices(asks[i].p->shape, asks[i].box))
        want.push_back(flat[static_cast<size_t>(asks[i].p->offset + at)]);
      CHECK(same_bits(outs[i], want));
    }
  }
}

TEST_CASE("column blocks saved by two ranks (tensor parallel) read back as any box") {
  // Rank r writes columns [3r, 3r + 3 + r) of a [5, 7] tensor: boxes that are no flat range.
  const std::vector<int64_t> shape = {5, 7};
  std::vector<float> w(35);
  std::iota(w.begin(), w.end(), 1.0f);
  TempDir tmp;
  for (int r : {1, 0}) {
    StateDict sd;
    const size_t t = sd.declare("model/w", shape);
    Box mine{{0, 3 * r}, {5, 3 + r}};
    sd.add(t, mine, [&w, &shape, mine](float* out) {
      for (int64_t at : flat_indices(shape, mine)) *out++ = w[static_cast<size_t>(at)];
    });
    RankSnapshot snap;
    snap.rank = r;
    take_snapshot(sd, &snap);
    TrainState st;
    st.step = 3;
    st.world_size = 2;
    snap.values = values_of(st);
    Checkpointer ck(tmp.str(), 0, false, r);
    ck.save(std::move(snap));
    if (r == 0) ck.commit(3, 2);
  }
  std::unique_ptr<StateSource> src = open_checkpoint(checkpoint_path(tmp.str(), 3), nullptr);
  // The whole tensor (each stored block lies inside it, not as one run), a flat range, a block
  // across both.
  for (const Box& ask : {whole(shape), Box{{1, 0}, {2, 7}}, Box{{1, 2}, {3, 3}}}) {
    CAPTURE(box_str(ask));
    std::vector<float> out(static_cast<size_t>(box_numel(ask)), -1.0f), want;
    src->read({{"model/w", ask, out.data()}});
    for (int64_t at : flat_indices(shape, ask)) want.push_back(w[static_cast<size_t>(at)]);
    CHECK(out == want);
  }
}

TEST_CASE("commit refuses ranks' slices that leave a gap or overlap") {
  CheckpointData d = model_state(8, 1);
  d.params = {{"w", {4, 6}, 0}};
  d.weights.resize(24);
  d.adam_m.clear();
  d.adam_v.clear();
  for (const bool gap : {true, false}) {
    CAPTURE(gap);
    TempDir tmp;
    // Rank 0 writes elements [0, 10); rank 1 from 11 (a gap) or from 9 (an overlap).
    const Shard parts[2] = {{0, 10}, {gap ? 11 : 9, 24}};
    for (int r : {1, 0}) {
      StateDict sd;
      add_flat_state(sd, "model", d.params, parts[r], [&](int64_t at, int64_t k, float* out) {
        std::copy(d.weights.begin() + at, d.weights.begin() + at + k, out);
      });
      TrainState st = d.state;
      st.world_size = 2;
      RankSnapshot snap;
      snap.rank = r;
      take_snapshot(sd, &snap);
      snap.values = values_of(st);
      Checkpointer ck(tmp.str(), 0, false, r);
      ck.save(std::move(snap));
      if (r == 0)
        CHECK_THROWS_WITH_AS(ck.commit(8, 2), doctest::Contains("tensor model/w"),
                             CheckpointWriteError);
    }
    CHECK_FALSE(fs::exists(fs::path(checkpoint_path(tmp.str(), 8)) / "MANIFEST"));
    CHECK(list_checkpoints(tmp.str()).empty());
  }
}

TEST_CASE("a checkpoint of another model is refused, naming the tensor") {
  const CheckpointData d = model_state(8, 2);
  TempDir tmp;
  const std::string dir = save_folder(tmp.str(), d, 2);
  std::unique_ptr<StateSource> src = open_checkpoint(dir, nullptr);
  StateBuffer out(d.weights.size(), -3.0f);
  const Shard all{0, static_cast<int64_t>(d.weights.size())};
  struct Case {
    const char* what;
    std::vector<ParamEntry> params;
    const char* says;
  };
  std::vector<ParamEntry> missing = d.params, shaped = d.params, extra = d.params;
  missing.push_back({"lm_head", {2, 2}, 200});  // the model has a tensor the checkpoint lacks
  shaped[2].shape = {5, 6};                     // the same size, another shape
  extra.pop_back();                             // the checkpoint holds a tensor the model lacks
  for (const Case& c : {Case{"missing", missing, "holds no tensor model/lm_head"},
                        Case{"shape", shaped, "model/blocks.0.mlp.fc.weight"},
                        Case{"extra", extra, "it holds model/scalar"}}) {
    CAPTURE(c.what);
    std::vector<float> buf(300);
    CHECK_THROWS_WITH_AS(read_flat_state(*src, "model", c.params, {0, 204}, buf.data()),
                         doctest::Contains(c.says), CheckpointError);
  }
  read_flat_state(*src, "model", d.params, all, out.data());  // its own model: fine
  CHECK(same_bits(out, expected(d, d.weights, all, -3.0f)));
}

namespace {

// Rank `rank`'s snapshot of one tensor [2] (its element `rank`), with the summary's values and
// `extra`.
RankSnapshot values_snapshot(int rank, int world, std::vector<NamedValue> extra) {
  StateDict sd;
  const size_t t = sd.declare("model/w", {2});
  sd.add(t, Box{{rank}, {1}}, [](float* out) { *out = 1.0f; });
  TrainState st;
  st.step = 5;
  st.world_size = world;
  st.seed = 0xffffffffffffffffull;  // every bit of a seed must come back
  st.lr_scale = 0.1 * 0.3;          // not exact in binary: must come back bit for bit
  for (NamedValue& v : values_of(st)) sd.put(std::move(v.name), v.value);
  for (NamedValue& v : extra) sd.put(std::move(v.name), v.value);
  RankSnapshot snap;
  snap.rank = rank;
  take_snapshot(sd, &snap);
  return snap;
}

}  // namespace

TEST_CASE("named values: stored exactly, served by name, listed by inspect; ranks must agree") {
  TempDir tmp;
  for (int r : {1, 0}) {
    Checkpointer ck(tmp.str(), 0, false, r);
    ck.save(values_snapshot(r, 2, {{"data/mixture_cursor", int64_t{-3}}, {"x/ratio", 2.5}}));
    if (r == 0) ck.commit(5, 2);
  }
  const std::string dir = checkpoint_path(tmp.str(), 5);
  REQUIRE(verify_checkpoint(dir).ok);
  TrainState summary;
  std::unique_ptr<StateSource> src = open_checkpoint(dir, &summary);
  CHECK(summary.seed == 0xffffffffffffffffull);
  CHECK(summary.lr_scale == 0.1 * 0.3);
  CHECK(summary.world_size == 2);
  CHECK(read_uint(*src, state_name::seed) == 0xffffffffffffffffull);
  CHECK(read_double(*src, state_name::lr_scale) == 0.1 * 0.3);
  CHECK(read_int(*src, "data/mixture_cursor") == -3);
  CHECK(read_double(*src, "x/ratio") == 2.5);
  CHECK(read_double(*src, state_name::step) == 5.0);  // any number reads as a double
  // The wrong type, or a value it does not hold, is refused with its name.
  CHECK_THROWS_WITH_AS(read_int(*src, "x/ratio"), doctest::Contains("x/ratio is 2.5"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(read_int(*src, state_name::seed), doctest::Contains("not a 64-bit"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(read_uint(*src, "data/mixture_cursor"), doctest::Contains("is -3"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(read_int(*src, "data/nothing"), doctest::Contains("holds no value"),
                       CheckpointError);
  const std::string text = describe_checkpoint(dir);
  CHECK(text.find("data/mixture_cursor: -3\n") != std::string::npos);
  CHECK(text.find("x/ratio: 2.5\n") != std::string::npos);
  CHECK(text.find("seed: 18446744073709551615\n") != std::string::npos);

  // Rank 1 says another value than rank 0: the commit refuses it, naming the file.
  TempDir other;
  for (int r : {1, 0}) {
    Checkpointer ck(other.str(), 0, false, r);
    ck.save(values_snapshot(r, 2, {{"data/mixture_cursor", int64_t{r}}}));
    if (r == 0)
      CHECK_THROWS_WITH_AS(ck.commit(5, 2), doctest::Contains("named values differ from rank 0"),
                           CheckpointWriteError);
  }
  CHECK_FALSE(fs::exists(fs::path(checkpoint_path(other.str(), 5)) / "MANIFEST"));

  // A name put twice is a component's bug.
  StateDict sd;
  sd.put("a/b", int64_t{1});
  CHECK_THROWS_AS(sd.put("a/b", 2.0), std::invalid_argument);
}
