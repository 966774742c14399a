#include "testing/harness/auth_channel.h"

#include <vector>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace manyshot::testing {
namespace {

class AuthInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit AuthInterceptor(std::string value) : value_(std::move(value)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", value_});
    }
    methods->Proceed();
  }

 private:
  std::string value_;
};

class AuthInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit AuthInterceptorFactory(std::string value) : value_(std::move(value)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new AuthInterceptor(value_);
  }

 private:
  std::string value_;
};

}  // namespace

std::shared_ptr<grpc::Channel> ChannelWithAuth(const std::string& address,
                                               const std::string& authorization) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<AuthInterceptorFactory>(authorization));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(), std::move(factories));
}

}  // namespace manyshot::testing
