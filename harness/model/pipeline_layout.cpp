#include "harness/model/pipeline_layout.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>

#include "harness/base/check.h"
#include "harness/model/pipeline_schedule.h"

namespace parity {
namespace {

using Layout = std::vector<std::vector<LayoutLayer>>;  // entry v * pp + p

constexpr std::size_t kMaxExpandedLayout = 1000000;

// Python's // and % (floor toward minus infinity): Megatron's arithmetic meets
// negative values where its checks let first + last exceed the layers (the
// placement check then rejects what it builds).
int floor_div(int a, int b) {
  int q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  return q;
}
int floor_mod(int a, int b) {
  int r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

std::string str(int v) { return std::to_string(v); }

std::string printable(char c) {
  if (std::isprint(static_cast<unsigned char>(c))) return std::string(1, c);
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
  return buf;
}

// One pass of re.sub(r'\(([^)]+)\)\*(\d+)', ...) (parens = true) or of
// re.sub(r'(.)\*(\d+)', ...): leftmost matches, no rescan of the output.
bool unroll(const std::string& in, bool parens, std::string* out, std::string* error) {
  auto digits_at = [&](std::size_t j) {
    return j < in.size() && std::isdigit((unsigned char)in[j]);
  };
  out->clear();
  std::size_t i = 0;
  while (i < in.size()) {
    std::size_t body_begin = 0, body_end = 0, star = std::string::npos;
    if (parens && in[i] == '(') {
      std::size_t close = in.find(')', i + 1);
      if (close != std::string::npos && close > i + 1 && close + 1 < in.size() &&
          in[close + 1] == '*' && digits_at(close + 2)) {
        body_begin = i + 1, body_end = close, star = close + 1;
      }
    } else if (!parens && in[i] != '\n' && i + 1 < in.size() && in[i + 1] == '*' &&
               digits_at(i + 2)) {
      body_begin = i, body_end = i + 1, star = i + 1;
    }
    if (star == std::string::npos) {
      out->push_back(in[i++]);
      continue;
    }
    std::size_t j = star + 1;
    std::size_t count = 0;
    bool too_long = false;
    while (digits_at(j)) {
      count = count * 10 + static_cast<std::size_t>(in[j++] - '0');
      if (count > kMaxExpandedLayout) too_long = true, count = kMaxExpandedLayout + 1;
    }
    const std::size_t body = body_end - body_begin;
    if (too_long || (body > 0 && count > kMaxExpandedLayout / body) ||
        out->size() + count * body > kMaxExpandedLayout) {
      *error = "expands to more than " + std::to_string(kMaxExpandedLayout) + " characters";
      return false;
    }
    for (std::size_t k = 0; k < count; ++k) out->append(in, body_begin, body);
    i = j;
  }
  if (out->size() > kMaxExpandedLayout) {
    *error = "expands to more than " + std::to_string(kMaxExpandedLayout) + " characters";
    return false;
  }
  return true;
}

int count_of(const std::vector<LayoutLayer>& chunk, LayoutLayer type) {
  return static_cast<int>(std::count(chunk.begin(), chunk.end(), type));
}

// The validated pieces every answer reads.
struct Resolved {
  const PipelineLayoutConfig* config = nullptr;
  std::optional<Layout> layout;
  int vpp = 1;                              // effective chunks per stage
  bool vpp_set() const { return vpp > 1; }  // Megatron's virtual size is not None
  bool uneven() const {
    return config->first_stage_layers.has_value() || config->last_stage_layers.has_value();
  }
  const std::vector<LayoutLayer>& chunk(int vp_stage, int pp_rank) const {
    return (*layout)[static_cast<std::size_t>(vpp_set() ? vp_stage : 0) * config->pp + pp_rank];
  }
  // Layers of `type` in the chunks before (pp_rank, vp_stage) in layer order
  // (PipelineParallelLayerLayout.get_layer_offset).
  int layout_offset(LayoutLayer type, int vp_stage, int pp_rank) const {
    const int vp = vpp_set() ? vp_stage : 0;
    int offset = 0;
    for (int v = 0; v <= vp; ++v)
      for (int p = 0; p < (v < vp ? config->pp : pp_rank); ++p)
        offset += count_of((*layout)[static_cast<std::size_t>(v) * config->pp + p], type);
    return offset;
  }
};

// get_transformer_layer_offset, line by line; nullopt where Python raises
// ZeroDivisionError (vpp with both uneven stages and no middle stage).
std::optional<int> raw_offset(const Resolved& r, int vp_stage, int pp_rank) {
  const PipelineLayoutConfig& c = *r.config;
  if (c.pp <= 1) return 0;
  if (r.layout) return r.layout_offset(LayoutLayer::decoder, vp_stage, pp_rank);
  if (r.uneven()) {
    const int middle_stages = c.pp - (c.first_stage_layers ? 1 : 0) - (c.last_stage_layers ? 1 : 0);
    const int first = c.first_stage_layers.value_or(0), last = c.last_stage_layers.value_or(0);
    const int middle_layers = c.num_layers - first - last;
    const int middle_rank = c.first_stage_layers ? pp_rank - 1 : pp_rank;
    if (r.vpp_set()) {
      const int first_chunk = c.first_stage_layers ? floor_div(first, r.vpp) : 0;
      const int last_chunk = c.last_stage_layers ? floor_div(last, r.vpp) : 0;
      const int middle_chunk = floor_div(middle_layers, r.vpp);
      const int total = first_chunk + middle_chunk + last_chunk;
      if (pp_rank == 0) return vp_stage * total;
      if (middle_stages == 0) return std::nullopt;
      return vp_stage * total + first_chunk + middle_rank * floor_div(middle_chunk, middle_stages);
    }
    const int per_rank = middle_stages > 0 ? floor_div(middle_layers, middle_stages) : 0;
    return pp_rank == 0 ? 0 : middle_rank * per_rank + first;
  }
  const int layers =
      c.num_layers + (c.account_for_embedding ? 1 : 0) + (c.account_for_loss ? 1 : 0);
  const int per_rank = floor_div(layers, c.pp);
  int offset = r.vpp_set()
                   ? vp_stage * floor_div(layers, r.vpp) + pp_rank * floor_div(per_rank, r.vpp)
                   : pp_rank * per_rank;
  if (c.account_for_embedding && !(vp_stage == 0 && pp_rank == 0)) offset -= 1;
  return offset;
}

// get_num_layers_to_build, line by line; nullopt where one of its asserts fails.
std::optional<int> raw_count(const Resolved& r, int vp_stage, int pp_rank) {
  const PipelineLayoutConfig& c = *r.config;
  if (r.layout) return count_of(r.chunk(vp_stage, pp_rank), LayoutLayer::decoder);
  const bool first_stage = pp_rank == 0, last_stage = pp_rank == c.pp - 1;
  int per_rank = 0;
  if (r.uneven()) {
    if (c.account_for_embedding || c.account_for_loss) return std::nullopt;
    int to_distribute = c.num_layers, stages_left = c.pp;
    if (c.first_stage_layers) to_distribute -= *c.first_stage_layers, --stages_left;
    if (c.last_stage_layers) to_distribute -= *c.last_stage_layers, --stages_left;
    if (stages_left > 0) {
      if (floor_mod(to_distribute, stages_left) != 0) return std::nullopt;
      per_rank = floor_div(to_distribute, stages_left);
    }
    if (first_stage && c.first_stage_layers) per_rank = *c.first_stage_layers;
    if (last_stage && c.last_stage_layers) per_rank = *c.last_stage_layers;
  } else {
    const int layers =
        c.num_layers + (c.account_for_embedding ? 1 : 0) + (c.account_for_loss ? 1 : 0);
    if (floor_mod(layers, c.pp) != 0) return std::nullopt;
    per_rank = floor_div(layers, c.pp);
  }
  int count = per_rank;
  if (r.vpp_set() && c.pp > 1) {
    if (floor_mod(per_rank, r.vpp) != 0) return std::nullopt;
    count = floor_div(per_rank, r.vpp);
  }
  if (c.account_for_embedding && vp_stage == 0 && first_stage && --count < 0) return std::nullopt;
  if (c.account_for_loss && vp_stage == r.vpp - 1 && last_stage && --count < 0) return std::nullopt;
  return count;
}

int raw_mtp_count(const Resolved& r, int vp_stage, int pp_rank) {
  const PipelineLayoutConfig& c = *r.config;
  if (r.layout) return count_of(r.chunk(vp_stage, pp_rank), LayoutLayer::mtp);
  return (pp_rank == c.pp - 1 && vp_stage == r.vpp - 1) ? c.mtp_layers : 0;
}

const char* const kLayers = "layers";
const char* const kPp = "pp";
const char* const kVpp = "vpp";
const char* const kFirst = "pp-first-layers";
const char* const kLast = "pp-last-layers";
const char* const kAccountEmbedding = "pp-account-embedding";
const char* const kAccountLoss = "pp-account-loss";
const char* const kLayout = "pp-layout";
const char* const kMtp = "mtp-layers";

// PipelineParallelLayerLayout.__init__ and validate_layer_layout, in order;
// `r` gets the layout and its vpp when it holds.
void check_layout(const PipelineLayoutConfig& c, Resolved* r,
                  std::vector<PipelineLayoutViolation>* out) {
  auto reject = [&](const std::string& rule) { out->push_back({kLayout, c.layout, rule}); };
  std::string error;
  std::optional<Layout> parsed = parse_pipeline_layout(c.layout, &error);
  if (!parsed) return reject(error);
  const Layout& layout = *parsed;
  const int stages = static_cast<int>(layout.size());
  if (stages % c.pp != 0)
    return reject("its " + str(stages) + " stages are not divisible by pp " + str(c.pp));
  const int vpp = stages / c.pp;
  if (c.vpp > 1 && c.vpp != vpp)
    return out->push_back({kVpp, str(c.vpp),
                           "the layout has " + str(vpp) + " model chunks per stage (" +
                               str(stages) + " stages / pp " + str(c.pp) + ")"});
  std::vector<LayoutLayer> flat;
  for (const auto& chunk : layout) flat.insert(flat.end(), chunk.begin(), chunk.end());
  auto count = [&](LayoutLayer t) { return count_of(flat, t); };
  if (flat.empty() || flat.front() != LayoutLayer::embedding)
    return reject("the first layer must be E (the embedding)");
  if (flat.back() != LayoutLayer::loss) return reject("the last layer must be L (the loss)");
  if (count(LayoutLayer::embedding) != 1) return reject("E must appear exactly once");
  if (count(LayoutLayer::loss) != 1) return reject("L must appear exactly once");
  if (count(LayoutLayer::decoder) != c.num_layers)
    return reject("it holds " + str(count(LayoutLayer::decoder)) +
                  " decoder layers (t), layers is " + str(c.num_layers));
  if (count(LayoutLayer::mtp) != c.mtp_layers)
    return reject("it holds " + str(count(LayoutLayer::mtp)) + " MTP layers (m), mtp-layers is " +
                  str(c.mtp_layers));
  auto first_m = std::find(flat.begin(), flat.end(), LayoutLayer::mtp);
  if (std::find(first_m, flat.end(), LayoutLayer::decoder) != flat.end())
    return reject("decoder layers (t) must come before the MTP layers (m)");
  for (int p = 0; p < c.pp; ++p)
    for (int v = 0; v + 1 < vpp; ++v)
      if (count_of(layout[static_cast<std::size_t>(v) * c.pp + p], LayoutLayer::mtp) > 0)
        return reject("MTP layers (m) must be in a stage's last model chunk (stage " + str(p) +
                      " has them in chunk " + str(v) + ")");
  for (int p = 0; p < c.pp; ++p) {
    const int m = count_of(layout[static_cast<std::size_t>(vpp - 1) * c.pp + p], LayoutLayer::mtp);
    if (m > 0 && m != c.mtp_layers)
      return reject("all MTP layers (m) must be in one model chunk (stage " + str(p) + " holds " +
                    str(m) + " of " + str(c.mtp_layers) + ")");
  }
  r->layout = std::move(parsed);
  r->vpp = vpp;
}

// TransformerConfig.__post_init__'s uneven-stage checks, in order, then
// get_num_layers_to_build's.
void check_uneven(const PipelineLayoutConfig& c, std::vector<PipelineLayoutViolation>* out) {
  int layers = c.num_layers, stages = c.pp;
  const bool vpp_set = c.vpp > 1;
  struct Side {
    const std::optional<int>& value;
    const char* field;
    const char* which;
  };
  for (const Side& s :
       {Side{c.first_stage_layers, kFirst, "first"}, Side{c.last_stage_layers, kLast, "last"}}) {
    if (!s.value) continue;
    if (*s.value <= 0) return out->push_back({s.field, str(*s.value), "must be larger than 0"});
    if (vpp_set && *s.value % c.vpp != 0)
      return out->push_back({s.field, str(*s.value),
                             std::string("the ") + s.which +
                                 " stage's layers must be divisible by vpp " + str(c.vpp)});
    layers -= *s.value;
    --stages;
  }
  const char* field = c.first_stage_layers ? kFirst : kLast;
  const std::string value =
      str(c.first_stage_layers ? *c.first_stage_layers : *c.last_stage_layers);
  if ((layers != 0) != (stages != 0))
    return out->push_back({field, value,
                           str(layers) + " layers remain for " + str(stages) +
                               " middle stages (either both or neither must be 0)"});
  if (stages > 0 && floor_mod(layers, stages) != 0)
    return out->push_back({field, value,
                           "the " + str(layers) + " middle layers are not divisible by the " +
                               str(stages) + " middle stages"});
  if (stages > 0 && vpp_set && floor_mod(floor_div(layers, stages), c.vpp) != 0)
    return out->push_back({kVpp, str(c.vpp),
                           "the " + str(floor_div(layers, stages)) +
                               " layers of each middle stage are not divisible by vpp " +
                               str(c.vpp)});
}

// The even split (with the embedding / loss counted as layers where asked):
// TransformerConfig's checks for the account flags, get_num_layers_to_build's
// asserts otherwise (the same rules).
void check_even(const PipelineLayoutConfig& c, std::vector<PipelineLayoutViolation>* out) {
  const bool account = c.account_for_embedding || c.account_for_loss;
  const int layers =
      c.num_layers + (c.account_for_embedding ? 1 : 0) + (c.account_for_loss ? 1 : 0);
  const std::string counted = account ? " (the embedding / loss counted as layers)" : "";
  if (layers % c.pp != 0)
    return out->push_back(
        {kLayers, str(c.num_layers),
         str(layers) + " layers" + counted + " are not divisible by pp " + str(c.pp)});
  if (c.vpp > 1 && c.pp > 1 && (layers / c.pp) % c.vpp != 0)
    return out->push_back({kVpp, str(c.vpp),
                           "the " + str(layers / c.pp) + " layers of each stage" + counted +
                               " are not divisible by vpp " + str(c.vpp)});
}

// Every chunk's answers as Megatron computes them must build each decoder
// layer and each MTP depth exactly once.
void check_partition(const Resolved& r, std::vector<PipelineLayoutViolation>* out) {
  const PipelineLayoutConfig& c = *r.config;
  const char* field = !c.layout.empty()      ? kLayout
                      : c.first_stage_layers ? kFirst
                      : c.last_stage_layers  ? kLast
                                             : kLayers;
  const std::string value = !c.layout.empty()      ? c.layout
                            : c.first_stage_layers ? str(*c.first_stage_layers)
                            : c.last_stage_layers  ? str(*c.last_stage_layers)
                                                   : str(c.num_layers);
  std::vector<int> built(static_cast<std::size_t>(c.num_layers), 0);
  int mtp = 0;
  for (int p = 0; p < c.pp; ++p)
    for (int v = 0; v < r.vpp; ++v) {
      const std::string chunk = "stage " + str(p) + " chunk " + str(v);
      std::optional<int> offset = raw_offset(r, v, p);
      if (!offset)
        return out->push_back(
            {field, value,
             "Megatron's layer offset divides by the number of middle stages, 0 "
             "here (vpp with both the first and the last stage's layers and pp 2)"});
      std::optional<int> count = raw_count(r, v, p);
      if (!count || *count < 0)
        return out->push_back(
            {field, value, "Megatron builds a negative number of layers on " + chunk});
      for (int l = *offset; l < *offset + *count; ++l) {
        if (l < 0 || l >= c.num_layers)
          return out->push_back(
              {field, value,
               "Megatron places layer " + str(l) + " (of " + str(c.num_layers) + ") on " + chunk});
        if (++built[static_cast<std::size_t>(l)] > 1)
          return out->push_back(
              {field, value,
               "Megatron builds layer " + str(l) + " twice (again on " + chunk + ")"});
      }
      mtp += raw_mtp_count(r, v, p);
    }
  for (int l = 0; l < c.num_layers; ++l)
    if (built[static_cast<std::size_t>(l)] == 0)
      return out->push_back({field, value, "Megatron builds layer " + str(l) + " on no stage"});
  if (mtp != c.mtp_layers)
    return out->push_back(
        {kMtp, str(c.mtp_layers), "Megatron builds " + str(mtp) + " MTP layers over the stages"});
}

std::vector<PipelineLayoutViolation> validate(const PipelineLayoutConfig& c, Resolved* r) {
  std::vector<PipelineLayoutViolation> out;
  r->config = &c;
  r->vpp = c.vpp;
  if (c.num_layers < 1) out.push_back({kLayers, str(c.num_layers), "must be at least 1"});
  if (c.pp < 1) out.push_back({kPp, str(c.pp), "must be at least 1"});
  if (c.vpp < 1) out.push_back({kVpp, str(c.vpp), "must be at least 1"});
  if (c.mtp_layers < 0) out.push_back({kMtp, str(c.mtp_layers), "must be at least 0"});
  if (!out.empty()) return out;
  const bool account = c.account_for_embedding || c.account_for_loss;
  if (r->uneven() && account) {
    const bool first = c.first_stage_layers.has_value();
    out.push_back({first ? kFirst : kLast,
                   str(first ? *c.first_stage_layers : *c.last_stage_layers),
                   "the first / last stage's layers cannot be combined with " +
                       std::string(c.account_for_embedding ? kAccountEmbedding : kAccountLoss)});
  }
  if (!c.layout.empty() && (r->uneven() || account))
    out.push_back({kLayout, c.layout,
                   "cannot be combined with pp-first-layers, pp-last-layers, "
                   "pp-account-embedding or pp-account-loss"});
  if (!out.empty()) return out;
  if (!c.layout.empty())
    check_layout(c, r, &out);
  else if (r->uneven())
    check_uneven(c, &out);
  else
    check_even(c, &out);
  if (!out.empty()) return out;
  if (c.pp == 1 && r->vpp > 1) {
    // Megatron's no-pipelining schedule asserts a single model chunk.
    const bool from_layout = !c.layout.empty() && c.vpp == 1;
    out.push_back({from_layout ? kLayout : kVpp, from_layout ? c.layout : str(c.vpp),
                   "more than one model chunk per stage needs pp > 1"});
    return out;
  }
  check_partition(*r, &out);
  return out;
}

std::string first_line(const std::vector<PipelineLayoutViolation>& v) {
  return "pipeline layout: " + v.front().field + " = " + v.front().value + ": " + v.front().rule;
}

Resolved resolve(const PipelineLayoutConfig& c, int vp_stage, int pp_rank) {
  Resolved r;
  std::vector<PipelineLayoutViolation> v = validate(c, &r);
  PARITY_CHECK(v.empty(), first_line(v));
  if (pp_rank < 0 || pp_rank >= c.pp || vp_stage < 0 || vp_stage >= r.vpp)
    throw std::out_of_range("pipeline layout: no chunk (pp_rank " + str(pp_rank) + ", vp_stage " +
                            str(vp_stage) + ") with pp " + str(c.pp) + ", vpp " + str(r.vpp));
  return r;
}

}  // namespace

std::optional<std::vector<std::vector<LayoutLayer>>> parse_pipeline_layout(const std::string& text,
                                                                           std::string* error) {
  std::string s;
  for (char ch : text)
    if (ch != ',') s.push_back(ch);  // commas are cosmetic
  std::string parens, single;
  if (!unroll(s, true, &parens, error) || !unroll(parens, false, &single, error))
    return std::nullopt;
  Layout layout(1);
  for (char ch : single) {
    switch (ch) {
      case '|':
        layout.emplace_back();
        break;
      case 'E':
        layout.back().push_back(LayoutLayer::embedding);
        break;
      case 't':
        layout.back().push_back(LayoutLayer::decoder);
        break;
      case 'm':
        layout.back().push_back(LayoutLayer::mtp);
        break;
      case 'L':
        layout.back().push_back(LayoutLayer::loss);
        break;
      default:
        *error = "invalid layer character '" + printable(ch) + "' in stage " +
                 str(static_cast<int>(layout.size()) - 1) + " (known: E, t, m, L, '|')";
        return std::nullopt;
    }
  }
  return layout;
}

std::vector<PipelineLayoutViolation> validate_pipeline_layout(const PipelineLayoutConfig& config) {
  Resolved r;
  return validate(config, &r);
}

std::vector<PipelineLayoutViolation> validate_pipeline_schedule(int pp, int vpp, int microbatches) {
  PipelineScheduleConfig schedule;
  schedule.pp = pp;
  schedule.vpp = vpp;
  schedule.microbatches = microbatches;
  return validate_pipeline_schedule(schedule);
}

int virtual_stages(const PipelineLayoutConfig& config) { return resolve(config, 0, 0).vpp; }

int layer_offset(const PipelineLayoutConfig& config, int vp_stage, int pp_rank) {
  return *raw_offset(resolve(config, vp_stage, pp_rank), vp_stage, pp_rank);
}

int num_layers_to_build(const PipelineLayoutConfig& config, int vp_stage, int pp_rank) {
  return *raw_count(resolve(config, vp_stage, pp_rank), vp_stage, pp_rank);
}

std::vector<int> chunk_layers(const PipelineLayoutConfig& config, int vp_stage, int pp_rank) {
  Resolved r = resolve(config, vp_stage, pp_rank);
  const int offset = *raw_offset(r, vp_stage, pp_rank), count = *raw_count(r, vp_stage, pp_rank);
  std::vector<int> layers;
  for (int l = offset; l < offset + count; ++l) layers.push_back(l);
  return layers;
}

ChunkId chunk_of_layer(const PipelineLayoutConfig& config, int layer) {
  Resolved r = resolve(config, 0, 0);
  for (int p = 0; p < config.pp; ++p)
    for (int v = 0; v < r.vpp; ++v) {
      const int offset = *raw_offset(r, v, p), count = *raw_count(r, v, p);
      if (layer >= offset && layer < offset + count) return {p, v};
    }
  throw std::out_of_range("pipeline layout: no layer " + str(layer) + " of " +
                          str(config.num_layers));
}

ChunkId embedding_chunk(const PipelineLayoutConfig& config) {
  resolve(config, 0, 0);
  return {0, 0};
}

ChunkId loss_chunk(const PipelineLayoutConfig& config) {
  Resolved r = resolve(config, 0, 0);
  return {config.pp - 1, r.vpp - 1};
}

int num_mtp_layers_to_build(const PipelineLayoutConfig& config, int vp_stage, int pp_rank) {
  return raw_mtp_count(resolve(config, vp_stage, pp_rank), vp_stage, pp_rank);
}

int mtp_layer_offset(const PipelineLayoutConfig& config, int vp_stage, int pp_rank) {
  Resolved r = resolve(config, vp_stage, pp_rank);
  if (config.pp <= 1 || !r.layout) return 0;
  return r.layout_offset(LayoutLayer::mtp, vp_stage, pp_rank);
}

std::optional<ChunkId> mtp_chunk(const PipelineLayoutConfig& config) {
  Resolved r = resolve(config, 0, 0);
  for (int p = 0; p < config.pp; ++p)
    for (int v = 0; v < r.vpp; ++v)
      if (raw_mtp_count(r, v, p) > 0) return ChunkId{p, v};
  return std::nullopt;
}

bool mtp_standalone(const PipelineLayoutConfig& config) {
  std::optional<ChunkId> chunk = mtp_chunk(config);
  return chunk && chunk->pp_rank != config.pp - 1;
}

int mtp_depth_number(const PipelineLayoutConfig& config, int vp_stage, int pp_rank, int depth) {
  const int local = num_mtp_layers_to_build(config, vp_stage, pp_rank);
  if (depth < 0 || depth >= local)
    throw std::out_of_range("pipeline layout: stage " + str(pp_rank) + " chunk " + str(vp_stage) +
                            " builds " + str(local) + " MTP layers, not depth " + str(depth));
  return depth + mtp_layer_offset(config, vp_stage, pp_rank);
}

int mtp_transformer_layer_number(const PipelineLayoutConfig& config, int vp_stage, int pp_rank,
                                 int depth) {
  return config.num_layers + mtp_depth_number(config, vp_stage, pp_rank, depth);
}

int moe_tracker_layers(const PipelineLayoutConfig& config) {
  resolve(config, 0, 0);
  return config.num_layers + config.mtp_layers;
}

}  // namespace parity
