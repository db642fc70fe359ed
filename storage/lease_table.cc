#include "storage/lease_table.h"

namespace kiln {

namespace {
std::string DomainOf(const std::string& key) { return key.substr(0, key.find('/')); }
bool IsDomainKey(const std::string& key) {
  return key.size() >= 2 && key.compare(key.size() - 2, 2, "/*") == 0;
}
}  // namespace

StorageLeaseTable::Use& StorageLeaseTable::Use::operator=(Use&& o) noexcept {
  if (this != &o) {
    if (table_) table_->Release(key_);
    table_ = o.table_;
    key_ = std::move(o.key_);
    o.table_ = nullptr;
  }
  return *this;
}

StorageLeaseTable::Use::~Use() {
  if (table_) table_->Release(key_);
}

void StorageLeaseTable::Hold(const std::string& domain, const std::string& candidate,
                             const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  holds_[Key(domain, candidate)].insert(id);
}

void StorageLeaseTable::Drop(const std::string& domain, const std::string& candidate,
                             const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = holds_.find(Key(domain, candidate));
  if (it == holds_.end()) return;
  it->second.erase(id);
  if (it->second.empty()) holds_.erase(it);
}

StorageLeaseTable::Use StorageLeaseTable::Acquire(const std::string& domain,
                                                  const std::string& candidate) {
  std::string key = Key(domain, candidate);
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !CollectingLocked(key); });
  ++uses_[key];
  return Use(this, key);
}

void StorageLeaseTable::Release(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = uses_.find(key);
  if (it != uses_.end() && --it->second <= 0) uses_.erase(it);
}

bool StorageLeaseTable::InUseLocked(const std::string& key) const {
  if (!IsDomainKey(key)) return holds_.count(key) > 0 || uses_.count(key) > 0;
  std::string prefix = DomainOf(key) + "/";
  auto starts = [&](const std::string& k) { return k.compare(0, prefix.size(), prefix) == 0; };
  for (auto it = holds_.lower_bound(prefix); it != holds_.end() && starts(it->first); ++it)
    return true;
  for (auto it = uses_.lower_bound(prefix); it != uses_.end() && starts(it->first); ++it)
    return true;
  return false;
}

bool StorageLeaseTable::CollectingLocked(const std::string& key) const {
  return collecting_.count(key) > 0 || collecting_.count(DomainOf(key) + "/*") > 0;
}

bool StorageLeaseTable::TryBeginCollect(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  if (InUseLocked(key) || collecting_.count(key)) return false;
  collecting_.insert(key);
  return true;
}

void StorageLeaseTable::EndCollect(const std::string& key) {
  {
    std::lock_guard<std::mutex> l(mu_);
    collecting_.erase(key);
  }
  cv_.notify_all();
}

std::set<std::string> StorageLeaseTable::Busy() const {
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::string> out;
  for (const auto& [k, v] : holds_) out.insert(k);
  for (const auto& [k, v] : uses_) out.insert(k);
  return out;
}

}  // namespace kiln
