// Progress lines in the format of --log-format: "glog" keeps glog's prefix on every line;
// "simple" and "json" print informational lines bare (JSON objects are built by the trainer)
// while warnings and errors keep glog's prefix (severity, time, file:line).
#pragma once
#include <glog/logging.h>

#include <cstdio>
#include <string>

namespace pn {

class BareInfoSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char* full_filename, const char* base_filename,
            int line, const google::LogMessageTime& time, const char* message,
            size_t message_len) override {
    const std::string text =
        severity == google::GLOG_INFO
            ? std::string(message, message_len)
            : ToString(severity, base_filename, line, time, message, message_len);
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
  }
};

// Called once the options are known (glog_prefix: --log-format glog); before that glog prints
// with its prefix.
inline void set_log_format(bool glog_prefix) {
  static BareInfoSink sink;
  static bool installed = false;
  if (glog_prefix || installed) return;
  for (google::LogSeverity s : {google::GLOG_INFO, google::GLOG_WARNING, google::GLOG_ERROR,
                                google::GLOG_FATAL})
    google::SetLogDestination(s, "");  // no log files
  FLAGS_logtostderr = false;
  FLAGS_alsologtostderr = false;
  FLAGS_stderrthreshold = google::NUM_SEVERITIES;  // glog's own stderr copy off: the sink prints
  google::AddLogSink(&sink);
  installed = true;
}

}  // namespace pn
