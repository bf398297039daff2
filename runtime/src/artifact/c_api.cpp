// The C API over kiln::rt::Model / Session: exceptions become status codes plus a per-thread
// message.

#include "kiln/runtime/c_api.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kiln/runtime/model.h"

struct kiln_model {
  std::shared_ptr<const kiln::rt::Model> model;
};
struct kiln_session {
  std::unique_ptr<kiln::rt::Session> session;
  std::vector<kiln::TensorImplPtr> in, out;  // reused wrappers (no allocation per run... mostly)
};

namespace {

thread_local std::string last_error;

kiln_status set_error(kiln_status s, const std::string& message) {
  last_error = message;
  return s;
}

kiln_status from_exception(const std::exception& e, kiln_status fallback) {
  if (dynamic_cast<const kiln::GuardError*>(&e)) return set_error(KILN_ERROR_GUARD, e.what());
  if (auto* k = dynamic_cast<const kiln::Error*>(&e)) {
    if (k->op() == "kiln load") return set_error(KILN_ERROR_IO, k->what());
    if (k->op() == "kiln artifact") return set_error(KILN_ERROR_INVALID_ARTIFACT, k->what());
    if (k->op() == "kiln run" && k->message().rfind("input \"", 0) == 0) {
      return set_error(KILN_ERROR_GUARD, k->what());
    }
  }
  return set_error(fallback, e.what());
}

kiln_status info_of(const std::vector<kiln::rt::TensorSpec>& specs, size_t i,
                    kiln_tensor_info* info) {
  if (!info || i >= specs.size()) {
    return set_error(KILN_ERROR_INVALID_ARGUMENT, "index out of range or null info");
  }
  info->name = specs[i].name.c_str();
  info->dtype = static_cast<kiln_dtype>(specs[i].dtype);
  info->rank = static_cast<int32_t>(specs[i].shape.size());
  info->shape = specs[i].shape.data();
  return KILN_OK;
}

// Wraps a caller buffer as a tensor after checking that its byte size matches its shape.
kiln::TensorImplPtr wrap(const kiln_tensor& t, const char* what, size_t i) {
  KILN_CHECK(t.data && t.rank >= 0 && t.rank <= 6 && (t.rank == 0 || t.shape) &&
                 static_cast<int>(t.dtype) >= 0 && static_cast<int>(t.dtype) < kiln::kNumDTypes,
             "kiln run", what, " ", i, ": invalid tensor (null data, bad rank or dtype)");
  std::span<const int64_t> shape(t.shape, static_cast<size_t>(t.rank));
  const auto dtype = static_cast<kiln::DType>(t.dtype);
  const int64_t n = kiln::checked_numel(shape, "kiln run");
  KILN_CHECK(static_cast<size_t>(n) * kiln::dtype_size(dtype) == t.nbytes, "kiln run", what, " ", i,
             ": nbytes ", t.nbytes, " does not match ", kiln::rt::describe_spec(shape, dtype));
  return kiln::from_blob(t.data, shape, dtype);
}

}  // namespace

extern "C" {

const char* kiln_status_string(kiln_status s) {
  switch (s) {
    case KILN_OK:
      return "ok";
    case KILN_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case KILN_ERROR_IO:
      return "i/o error";
    case KILN_ERROR_INVALID_ARTIFACT:
      return "invalid artifact";
    case KILN_ERROR_GUARD:
      return "input does not match the artifact's guard";
    case KILN_ERROR_RUNTIME:
      return "runtime error";
  }
  return "unknown status";
}

const char* kiln_last_error(void) {
  return last_error.c_str();
}
void kiln_string_free(char* s) {
  std::free(s);
}
size_t kiln_dtype_size(kiln_dtype d) {
  if (static_cast<int>(d) < 0 || static_cast<int>(d) >= kiln::kNumDTypes) return 0;
  return kiln::dtype_size(static_cast<kiln::DType>(d));
}

// Whether `field` lies within the first `size` bytes of the caller's kiln_load_options.
#define KILN_OPTION_IN(size, field) \
  (offsetof(kiln_load_options, field) + sizeof(kiln_load_options::field) <= (size))

void kiln_load_options_init_sized(kiln_load_options* options, size_t struct_size) {
  if (!options || struct_size < sizeof(size_t)) return;
  const kiln::rt::LoadOptions defaults;
  options->struct_size = std::min(struct_size, sizeof(kiln_load_options));
  if (KILN_OPTION_IN(struct_size, prepare_weights))
    options->prepare_weights = defaults.prepare_weights ? 1 : 0;
  if (KILN_OPTION_IN(struct_size, populate)) options->populate = defaults.populate ? 1 : 0;
  if (KILN_OPTION_IN(struct_size, allow_native_code))
    options->allow_native_code = defaults.allow_native_code ? 1 : 0;
}

kiln_status kiln_model_load(const char* path, kiln_model** model, char** error_message) {
  return kiln_model_load_with_options(path, nullptr, model, error_message);
}

kiln_status kiln_model_load_with_options(const char* path, const kiln_load_options* options,
                                         kiln_model** model, char** error_message) {
  if (error_message) *error_message = nullptr;
  if (!path || !model) return set_error(KILN_ERROR_INVALID_ARGUMENT, "null path or model");
  *model = nullptr;
  kiln_status s = KILN_OK;
  try {
    kiln::rt::LoadOptions lo;
    if (options) {  // fields past the caller's struct_size keep their defaults
      const size_t n = options->struct_size;
      if (KILN_OPTION_IN(n, prepare_weights)) lo.prepare_weights = options->prepare_weights != 0;
      if (KILN_OPTION_IN(n, populate)) lo.populate = options->populate != 0;
      if (KILN_OPTION_IN(n, allow_native_code))
        lo.allow_native_code = options->allow_native_code != 0;
    }
    *model = new kiln_model{kiln::rt::Model::load(path, kiln::rt::builtin_registry(), lo)};
  } catch (const std::exception& e) {
    s = from_exception(e, KILN_ERROR_INVALID_ARTIFACT);
  }
  if (s != KILN_OK && error_message) *error_message = strdup(last_error.c_str());
  return s;
}

void kiln_model_free(kiln_model* model) {
  delete model;
}
size_t kiln_model_num_inputs(const kiln_model* m) {
  return m ? m->model->inputs().size() : 0;
}
size_t kiln_model_num_outputs(const kiln_model* m) {
  return m ? m->model->outputs().size() : 0;
}
kiln_status kiln_model_input(const kiln_model* m, size_t i, kiln_tensor_info* info) {
  if (!m) return set_error(KILN_ERROR_INVALID_ARGUMENT, "null model");
  return info_of(m->model->inputs(), i, info);
}
kiln_status kiln_model_output(const kiln_model* m, size_t i, kiln_tensor_info* info) {
  if (!m) return set_error(KILN_ERROR_INVALID_ARGUMENT, "null model");
  return info_of(m->model->outputs(), i, info);
}

kiln_status kiln_session_create(const kiln_model* model, kiln_session** session) {
  if (!model || !session) return set_error(KILN_ERROR_INVALID_ARGUMENT, "null model or session");
  try {
    *session = new kiln_session{std::make_unique<kiln::rt::Session>(model->model), {}, {}};
    return KILN_OK;
  } catch (const std::exception& e) {
    *session = nullptr;
    return from_exception(e, KILN_ERROR_RUNTIME);
  }
}

void kiln_session_free(kiln_session* session) {
  delete session;
}

kiln_status kiln_session_run(kiln_session* s, const kiln_tensor* inputs, size_t num_inputs,
                             kiln_tensor* outputs, size_t num_outputs) {
  if (!s || (num_inputs && !inputs) || (num_outputs && !outputs)) {
    return set_error(KILN_ERROR_INVALID_ARGUMENT, "null session, inputs or outputs");
  }
  try {
    s->in.clear();
    s->out.clear();
    std::vector<const kiln::TensorImpl*> in;
    std::vector<kiln::TensorImpl*> out;
    for (size_t i = 0; i < num_inputs; ++i) {
      s->in.push_back(wrap(inputs[i], "input", i));
      in.push_back(s->in.back().get());
    }
    for (size_t i = 0; i < num_outputs; ++i) {
      s->out.push_back(wrap(outputs[i], "output", i));
      out.push_back(s->out.back().get());
    }
    s->session->run_into(in, out);
    return KILN_OK;
  } catch (const std::exception& e) {
    const kiln_status st = from_exception(e, KILN_ERROR_RUNTIME);
    if (st == KILN_ERROR_RUNTIME &&
        std::string(e.what()).find("instruction") == std::string::npos) {
      return set_error(KILN_ERROR_INVALID_ARGUMENT, e.what());
    }
    return st;
  }
}

}  // extern "C"
