// Post-processors (see post_processor.h). Every supported kind reduces to a
// single-sequence template of fixed ids around the sequence.
#include "tokenizer/post_processor.h"

namespace pagedkv::tokenizer {

void PostProcessor::process(std::vector<int32_t>* ids) const {
  if (items_.empty()) return;
  std::vector<int32_t> out;
  out.reserve(ids->size() + 4);
  for (const Item& it : items_) {
    if (it.is_sequence) {
      out.insert(out.end(), ids->begin(), ids->end());
    } else {
      out.insert(out.end(), it.ids.begin(), it.ids.end());
    }
  }
  ids->swap(out);
}

namespace {

Status parse_into(const Json& j, const std::string& path, std::vector<PostProcessor::Item>* items) {
  PKV_ASSIGN_OR_RETURN(std::string type, json_type(j, path));
  const std::string where = path + " (" + type + ")";
  if (type == "ByteLevel") {
    return json_only_keys(j, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, where);
  }
  auto apply = [&](std::vector<PostProcessor::Item> tmpl) {
    if (items->empty()) {
      *items = std::move(tmpl);
      return;
    }
    // Compose: substitute the current template for the sequence.
    std::vector<PostProcessor::Item> out;
    for (auto& t : tmpl) {
      if (t.is_sequence) {
        out.insert(out.end(), items->begin(), items->end());
      } else {
        out.push_back(std::move(t));
      }
    }
    *items = std::move(out);
  };
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto id_of = [&](const char* key) -> StatusOr<int32_t> {
      auto it = j.find(key);
      if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
        return json_error(where + "." + key, "expected [token, id]");
      }
      return (*it)[1].get<int32_t>();
    };
    PKV_ASSIGN_OR_RETURN(int32_t cls, id_of("cls"));
    PKV_ASSIGN_OR_RETURN(int32_t sep, id_of("sep"));
    PostProcessor::Item a, seq, b;
    a.ids = {cls};
    seq.is_sequence = true;
    b.ids = {sep};
    apply({a, seq, b});
    return ok_status();
  }
  if (type == "TemplateProcessing") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "single", "pair", "special_tokens"}, where));
    auto single = j.find("single");
    if (single == j.end() || !single->is_array())
      return json_error(where, "missing array 'single'");
    const Json empty = Json::object();
    auto st = j.find("special_tokens");
    const Json& specials = (st != j.end() && st->is_object()) ? *st : empty;
    std::vector<PostProcessor::Item> tmpl;
    for (size_t i = 0; i < single->size(); ++i) {
      const Json& e = (*single)[i];
      const std::string ipath = where + ".single[" + std::to_string(i) + "]";
      PostProcessor::Item item;
      if (e.contains("Sequence")) {
        const Json& s = e["Sequence"];
        if (!s.is_object() || s.value("id", std::string()) != "A") {
          return json_error(ipath, "only the sequence \"A\" is supported in a single template");
        }
        item.is_sequence = true;
      } else if (e.contains("SpecialToken")) {
        const Json& s = e["SpecialToken"];
        if (!s.is_object() || !s.contains("id") || !s["id"].is_string()) {
          return json_error(ipath, "SpecialToken needs a string 'id'");
        }
        std::string name = s["id"].get<std::string>();
        auto sp = specials.find(name);
        if (sp == specials.end() || !sp->is_object() || !sp->contains("ids") ||
            !(*sp)["ids"].is_array()) {
          return json_error(ipath, "special token '" + name + "' is not in special_tokens");
        }
        for (const auto& id : (*sp)["ids"]) {
          if (!id.is_number_integer())
            return json_error(ipath, "special token ids must be integers");
          item.ids.push_back(id.get<int32_t>());
        }
      } else {
        return json_error(ipath, "expected {\"Sequence\": ..} or {\"SpecialToken\": ..}");
      }
      tmpl.push_back(std::move(item));
    }
    apply(std::move(tmpl));
    return ok_status();
  }
  if (type == "Sequence") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "processors"}, where));
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) return json_error(where, "missing array 'processors'");
    for (size_t i = 0; i < it->size(); ++i) {
      PKV_RETURN_IF_ERROR(
          parse_into((*it)[i], path + ".processors[" + std::to_string(i) + "]", items));
    }
    return ok_status();
  }
  return json_error(path, "unsupported post_processor type '" + type + "'");
}

}  // namespace

StatusOr<std::unique_ptr<PostProcessor>> PostProcessor::create(const Json& j,
                                                               const std::string& path) {
  if (j.is_null()) return std::unique_ptr<PostProcessor>();
  std::unique_ptr<PostProcessor> p(new PostProcessor());
  PKV_RETURN_IF_ERROR(parse_into(j, path, &p->items_));
  return p;
}

}  // namespace pagedkv::tokenizer
