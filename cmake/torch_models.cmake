# Real models from PyTorch (label `models`, issue 14): torchvision classification models exported with
# tools/torch2kiln.py into ${CMAKE_BINARY_DIR}/models/ at test time (never committed), then, per model:
#   models.<m>.<dtype>.validate   kiln validate of the exported graph (f32 and f16)
#   models.<m>.<dtype>.emu        kiln run --device emu --check: the generated kernels against ref
#   models.<m>.reference          kiln's f64 reference on random weights vs PyTorch in float64
# and models.unsupported (a model with nodes kiln cannot run: exit 2, each named).
# Needs PyTorch for KILN_TORCH_PYTHON (tools/setup.sh --torch); without it the tests are still registered
# and fail, the exporter saying what to install. Emu kernels are cached in models/cache (warm after the
# first run of a build tree); each emu test runs on one thread so `ctest -j` sets the parallelism.
set(KILN_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with torch, torchvision and numpy (models tests)")
set(KILN_TORCH_MODELS
    resnet18:64 resnet50:64 mobilenet_v2:64 mobilenet_v3_small:64 efficientnet_b0:64 regnet_y_400mf:64
    densenet121:64 googlenet:64 squeezenet1_0:64 convnext_tiny:64 vgg11_bn:32
    CACHE STRING "torchvision models NAME:RESOLUTION of the models tests (VGG's 7x7 adaptive pool: 32 or 224)")
# Plus tests/models/op_zoo.py (every module and function the exporter maps, in one small model) and
# tests/models/tiny_vit.py (a 2-layer torchvision ViT: nn.MultiheadAttention).
set(KILN_MODELS_ALL ${KILN_TORCH_MODELS} ${PROJECT_SOURCE_DIR}/tests/models/op_zoo.py:build:32
                    ${PROJECT_SOURCE_DIR}/tests/models/tiny_vit.py:build:32)

execute_process(COMMAND ${KILN_TORCH_PYTHON} -c "import torch, torchvision, numpy"
                RESULT_VARIABLE KILN_TORCH_FOUND_RC OUTPUT_QUIET ERROR_QUIET)
if(NOT KILN_TORCH_FOUND_RC EQUAL 0)
  message(WARNING "models tests: ${KILN_TORCH_PYTHON} cannot import torch, torchvision and numpy; the tests "
                  "(label models) are registered and will fail. Install them with tools/setup.sh --torch.")
endif()

set(KILN_MODELS_DIR ${CMAKE_BINARY_DIR}/models)
set(KILN_MODELS_ENV KILN_CACHE_DIR=${KILN_MODELS_DIR}/cache KILN_EMU_THREADS=1)

add_test(NAME models.export
         COMMAND ${KILN_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tests/models/export_all.py ${KILN_MODELS_DIR}
                 --dtypes f32,f16 ${KILN_MODELS_ALL})
set_tests_properties(models.export PROPERTIES LABELS models FIXTURES_SETUP kiln_models TIMEOUT 300)

foreach(spec ${KILN_MODELS_ALL})
  string(REGEX MATCH "^(.+):([0-9]+(,[0-9]+)?)$" matched ${spec})  # MODEL:RES, MODEL may be FILE.py:FUNCTION
  set(source ${CMAKE_MATCH_1})
  set(res ${CMAKE_MATCH_2})
  string(REGEX REPLACE "\\.py:.*$" "" model ${source})
  get_filename_component(model ${model} NAME)
  foreach(dtype f32 f16)
    set(graph ${KILN_MODELS_DIR}/${model}/${dtype}/graph.json)
    add_test(NAME models.${model}.${dtype}.validate COMMAND kiln_cli validate ${graph})
    add_test(NAME models.${model}.${dtype}.emu COMMAND kiln_cli run ${graph} --device emu --check)
    set_tests_properties(models.${model}.${dtype}.validate models.${model}.${dtype}.emu PROPERTIES
                         LABELS models FIXTURES_REQUIRED kiln_models TIMEOUT 300 ENVIRONMENT "${KILN_MODELS_ENV}")
  endforeach()
  add_test(NAME models.${model}.reference
           COMMAND ${PROJECT_SOURCE_DIR}/tests/models/check_reference.sh $<TARGET_FILE:kiln_cli> ${KILN_TORCH_PYTHON}
                   ${source} ${res} ${KILN_MODELS_DIR}/${model}/weights)
  set_tests_properties(models.${model}.reference PROPERTIES LABELS models TIMEOUT 300)
  if(model MATCHES "^vgg")  # 133 M parameters, about 2 GiB per test: one at a time
    set_tests_properties(models.${model}.f32.emu models.${model}.f16.emu models.${model}.reference
                         PROPERTIES RESOURCE_LOCK kiln_models_vgg)
  endif()
endforeach()

# Training: every parameter's gradient from kiln's training graph against PyTorch autograd in float64
# (tests/models/check_gradients.py; issue 33's whole-model check): on ref within relative L2 1e-6 for the four
# models the issue names, batch 4 at 64x64, and ResNet-18's parameters after 3 SGD steps (kiln train against
# torch.optim.SGD) within 1e-5; the generated kernels on emu within 1e-4 (ResNet-18, batch 2, 32x32).
foreach(model resnet18 mobilenet_v2 efficientnet_b0 convnext_tiny)
  set(sgd "")
  if(model STREQUAL "resnet18")
    set(sgd --sgd-steps 3)
  endif()
  add_test(NAME models.${model}.gradients
           COMMAND ${KILN_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tests/models/check_gradients.py ${model}:64 --batch 4
                   --max-rel-l2 1e-6 ${sgd} --kiln $<TARGET_FILE:kiln_cli>)
  set_tests_properties(models.${model}.gradients PROPERTIES LABELS models TIMEOUT 300)
endforeach()
add_test(NAME models.resnet18.gradients.emu
         COMMAND ${KILN_TORCH_PYTHON} ${PROJECT_SOURCE_DIR}/tests/models/check_gradients.py resnet18:32 --device emu
                 --max-rel-l2 1e-4 --kiln $<TARGET_FILE:kiln_cli>)
set_tests_properties(models.resnet18.gradients.emu PROPERTIES LABELS models TIMEOUT 300
                     ENVIRONMENT "${KILN_MODELS_ENV}")

# models.exporter_ops (the exporter's op map against the op registry) needs the Python module:
# python/CMakeLists.txt registers it.

add_test(NAME models.unsupported
         COMMAND ${PROJECT_SOURCE_DIR}/tests/models/expect_unsupported.sh ${KILN_TORCH_PYTHON}
                 ${KILN_MODELS_DIR}/unsupported)
set_tests_properties(models.unsupported PROPERTIES LABELS models TIMEOUT 60)

# The same models through ONNX (labels `models` and `onnx`): torch.onnx.export at opset 13, then `kiln run
# model.onnx` on ref against PyTorch and on emu with --check (tests/models/check_onnx.sh, docs/onnx.md); and
# tests/models/onnx_zoo.py (the modules those models lack) at opsets 13 and 17.
set(KILN_ONNX_TORCH_MODELS resnet18:64:13 mobilenet_v2:64:13 mobilenet_v3_small:64:13 efficientnet_b0:64:13
                     googlenet:64:13 squeezenet1_0:64:13 regnet_y_400mf:64:13 densenet121:64:13 convnext_tiny:64:13
    CACHE STRING "torchvision models NAME:RESOLUTION:OPSET exported to ONNX for the onnx models tests")
if(KILN_HAVE_ONNX)
  foreach(spec ${KILN_ONNX_TORCH_MODELS} ${PROJECT_SOURCE_DIR}/tests/models/onnx_zoo.py:build:32:13
               ${PROJECT_SOURCE_DIR}/tests/models/onnx_zoo.py:build:32:17)
    string(REGEX MATCH "^(.+):([0-9]+):([0-9]+)$" matched ${spec})  # MODEL:RES:OPSET, MODEL may be FILE.py:FUNCTION
    if(NOT matched)
      message(FATAL_ERROR "kiln: KILN_ONNX_TORCH_MODELS entry '${spec}' is not MODEL:RESOLUTION:OPSET")
    endif()
    set(source ${CMAKE_MATCH_1})
    set(res ${CMAKE_MATCH_2})
    set(opset ${CMAKE_MATCH_3})
    string(REGEX REPLACE "\\.py:.*$" "" model ${source})
    get_filename_component(model ${model} NAME)
    set(name onnx.models.${model})
    if(NOT opset EQUAL 13)
      set(name ${name}.opset${opset})
    endif()
    add_test(NAME ${name}
             COMMAND ${PROJECT_SOURCE_DIR}/tests/models/check_onnx.sh $<TARGET_FILE:kiln_cli> ${KILN_TORCH_PYTHON}
                     ${source} ${res} ${KILN_MODELS_DIR}/${name} ${opset})
    set_tests_properties(${name} PROPERTIES LABELS "models;onnx" TIMEOUT 600 ENVIRONMENT "${KILN_MODELS_ENV}")
  endforeach()
  # A dynamic batch (issue 32): exported with the batch as 'batch', imported without --shape, run at batch 3
  # (from the input file) and 1.
  add_test(NAME onnx.models.resnet18.dynamic_batch
           COMMAND ${PROJECT_SOURCE_DIR}/tests/models/check_onnx.sh $<TARGET_FILE:kiln_cli> ${KILN_TORCH_PYTHON}
                   resnet18 64 ${KILN_MODELS_DIR}/onnx.models.resnet18.dynamic_batch 13 3)
  set_tests_properties(onnx.models.resnet18.dynamic_batch PROPERTIES LABELS "models;onnx" TIMEOUT 600
                                                                     ENVIRONMENT "${KILN_MODELS_ENV}")
  # ShuffleNet's channel shuffle reads the batch with Shape (x.size()) and views around it: the exporter's
  # Shape -> Gather -> Concat -> Reshape chains, folded at both ends of the batch's range.
  add_test(NAME onnx.models.shufflenet_v2_x0_5.dynamic_batch
           COMMAND ${PROJECT_SOURCE_DIR}/tests/models/check_onnx.sh $<TARGET_FILE:kiln_cli> ${KILN_TORCH_PYTHON}
                   shufflenet_v2_x0_5 64 ${KILN_MODELS_DIR}/onnx.models.shufflenet_v2_x0_5.dynamic_batch 13 3)
  set_tests_properties(onnx.models.shufflenet_v2_x0_5.dynamic_batch PROPERTIES LABELS "models;onnx" TIMEOUT 600
                                                                               ENVIRONMENT "${KILN_MODELS_ENV}")
endif()
